//! One Luau VM and everything around it.

pub(crate) mod budget;
