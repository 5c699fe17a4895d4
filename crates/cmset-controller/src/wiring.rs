//! Where the rooms are put together, above all of them: the flags that configure every room
//! ([`cli`]), the leading of a scope ([`lead`]), which assembles the context the controllers share
//! from the engine's parts, the measurer and the notifier, and runs the controllers, and the runtimes
//! the engine and serving run on ([`runtimes`]). Only this room and `main` see every other room; none
//! of them imports it.

pub mod cli;
pub mod lead;
pub mod runtimes;
