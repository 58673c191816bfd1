//! One integration test binary, made of modules, that drives the real `ibi`
//! binary through `TestEnv` (fd style).

mod crash;
mod demo;
mod deposit;
mod env;
mod far;
mod handles;
mod hostile;
mod ident;
mod invalid;
mod log;
mod minting;
mod out_of_tree;
mod regress;
mod s3;
mod scale;
mod serve;
mod sites;
mod transfer;
mod uniqueness;
mod verify;
mod versions;
mod watch;
