//! Rewrites of the lowered graph: element-wise fusion, copy elision and write-through
//! ([`rewrite`]), storage precision ([`precision`]), activation layout ([`layout`]), and which
//! convolutions may take their successor into one cuDNN graph ([`fusion`]).

pub mod fusion;
pub mod layout;
pub mod precision;
pub mod rewrite;
