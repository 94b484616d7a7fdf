//! One Luau VM and everything around it. The integrator adds the rest of this layer.

pub(crate) mod loader;
