//! Running the network: the launch list ([`launch`]), the kernel library ([`kernels`]), the
//! GPU engine ([`engine`]), and the two host executors that prove it without a GPU: the
//! reference executor of the IR ([`mod@reference`]) and the emulation of the launch list
//! ([`emulate`]).

pub mod emulate;
pub mod engine;
pub mod kernels;
pub mod launch;
pub mod reference;
