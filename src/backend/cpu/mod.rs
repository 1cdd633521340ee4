//! The CPU backend: the reference implementation of every op.
