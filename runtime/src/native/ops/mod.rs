//! The operators: what each step kind of the IR does, from its lowering to its launch.

pub mod gemm;
