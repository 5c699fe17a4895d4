//! Where the rooms are put together, above all of them: the flags that configure every room
//! ([`cli`]). Only this room and `main` see every other room; none of them imports it.

pub mod cli;
