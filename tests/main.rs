//! Skein's integration tests: one binary, one module per area, because each test binary relinks Luau.

mod value;
