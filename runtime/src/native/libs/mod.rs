//! The NVIDIA libraries the engine calls, loaded at run time ([`load`]): thin wrappers over
//! cuDNN ([`cudnn`], its graph API [`cudnn_graph`]) and cuBLAS ([`cublas`]), and the on-disk
//! cache of cuDNN's serialised plans ([`plan_cache`]).

pub mod cublas;
pub mod cudnn;
pub mod cudnn_graph;
pub mod load;
pub mod plan_cache;
