//! cmset core
