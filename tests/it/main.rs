//! One integration test binary, made of modules, that drives the real `ibi`
//! binary through `TestEnv` (fd style).

mod env;
mod ident;
mod invalid;
mod uniqueness;
