//! (in progress)

pub mod trainer;
