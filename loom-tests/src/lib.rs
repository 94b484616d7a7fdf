//! Loom models of Skein's lock-free protocols live in `tests/`.
