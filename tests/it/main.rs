//! One integration test binary, made of modules, that drives the real `ibi`
//! binary through `TestEnv` (fd style).

mod deposit;
mod env;
mod ident;
mod invalid;
mod uniqueness;
mod verify;
mod watch;
