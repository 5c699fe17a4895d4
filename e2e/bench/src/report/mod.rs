//! What a run found: `results.json` (everything), `table.md` (the summary, also printed) and two SVG
//! plots. Every time is also given as a multiple of the floor measured just before its stage, because
//! the machines are shared and noisy: only those ratios compare across runs. A run measures one or
//! more configurations (with and without the webhook); the table shows them side by side.
//!
//! The folder splits it by what is written: `results` is the schema of results.json (and the
//! percentiles the stages compute into it), `load` reads one back (also from before configurations
//! existed), `rows` writes each stage's figures as rows of the summary, `cells` how one figure is
//! written in a cell, `table` lays the rows out side by side as Markdown, `plots` draws the SVGs,
//! `completeness` says which figures a run should have produced (`--strict`), and `paths` keeps the
//! machine's paths out of what is published.

mod cells;
mod completeness;
mod load;
mod paths;
mod plots;
mod results;
mod rows;
mod table;

pub use self::cells::pct_by_role;
pub use self::completeness::{Expected, missing};
pub use self::load::load;
pub use self::paths::scrub_paths;
pub use self::plots::{plot_churn, plot_scaling};
pub use self::results::*;
pub use self::table::table;
