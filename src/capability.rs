//! What a sandbox mechanism does on this machine, as every layer reports it: the walls
//! a backend installs, what a platform lacks, and what the guard cannot see. It sits
//! below the backends and `selftest` so that each can say what it enforces without
//! importing the layer that gathers the reports.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One mechanism and whether it is in force here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Capability {
    pub mechanism: String,
    /// Enforced on this machine now.
    pub enforced: bool,
    /// What it does, or why it is not available here.
    pub reason: String,
}
