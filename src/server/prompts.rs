//! MCP prompts: reviewable text in `prompts/`, embedded at build time and filled with the
//! caller's arguments.

use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{PromptMessage, Role};
use rmcp::{prompt, prompt_router};

use super::WardenServer;

const DATA_ANALYSIS: &str = include_str!("../../prompts/data_analysis.md");

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct DataAnalysisArgs {
    /// What to find out, in a sentence.
    pub task: String,
    /// A file already in the workspace (or passed with `inputs`) to start from.
    #[serde(default)]
    pub file: Option<String>,
}

/// Fills the data-analysis prompt. Pure.
pub fn data_analysis_text(args: &DataAnalysisArgs) -> String {
    let file_hint = match &args.file {
        Some(f) => format!("Start from the workspace file `{f}`. "),
        None => String::new(),
    };
    DATA_ANALYSIS
        .replace("{task}", args.task.trim())
        .replace("{file_hint}", &file_hint)
}

#[prompt_router(vis = "pub(crate)")]
impl WardenServer {
    #[prompt(
        name = "sandboxed_data_analysis",
        description = "Analyse data with warden's sandboxed Python: how to use sessions, inputs, files, grants and limits."
    )]
    async fn sandboxed_data_analysis(
        &self,
        Parameters(args): Parameters<DataAnalysisArgs>,
    ) -> Vec<PromptMessage> {
        vec![PromptMessage::new_text(
            Role::User,
            data_analysis_text(&args),
        )]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_is_filled_with_the_task_and_file() {
        let text = data_analysis_text(&DataAnalysisArgs {
            task: "Which city sold most?".into(),
            file: Some("sales.csv".into()),
        });
        assert!(
            text.starts_with(
                "You have warden's sandboxed Python tools. Task: Which city sold most?"
            )
        );
        assert!(text.contains("Start from the workspace file `sales.csv`."));
        assert!(!text.contains('{') || text.contains("{\"base64\""));
        let text = data_analysis_text(&DataAnalysisArgs {
            task: "x".into(),
            file: None,
        });
        assert!(!text.contains("{file_hint}"));
    }
}
