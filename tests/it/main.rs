//! One integration test binary, made of modules, that drives the real `ibi`
//! binary through `TestEnv` (fd style).

// libtest starts tests in the order of their names, six at a time in CI: the
// slowest single test (about 70 s) is named to start first, so it runs beside the
// others instead of alone at the end.
mod at_scale;
mod crash;
mod demo;
mod deposit;
mod docs;
mod env;
mod far;
mod handles;
mod hostile;
mod ident;
mod invalid;
mod log;
mod minting;
mod names;
mod ocfl;
mod out_of_tree;
mod regress;
mod s3;
mod serve;
mod sites;
mod transfer;
mod truth;
mod uniqueness;
mod verify;
mod versions;
mod watch;
