//! Where and when every step runs: the streams and events ([`schedule`]) and the memory
//! plan ([`memory`]).

pub mod memory;
pub mod schedule;
