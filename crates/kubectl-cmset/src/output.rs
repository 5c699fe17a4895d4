//! `-o json` and `-o yaml`.

use serde::Serialize;

use crate::cli::Output;
use crate::error::Error;

/// `value` as pretty JSON or YAML, ending in a newline; `None` for [`Output::Table`].
pub fn structured<T: Serialize>(value: &T, format: Output) -> Result<Option<String>, Error> {
    match format {
        Output::Table => Ok(None),
        Output::Json => serde_json::to_string_pretty(value)
            .map(|s| Some(s + "\n"))
            .map_err(|e| Error::Serialize {
                format: "JSON",
                message: e.to_string(),
            }),
        Output::Yaml => serde_yaml_ng::to_string(value)
            .map(Some)
            .map_err(|e| Error::Serialize {
                format: "YAML",
                message: e.to_string(),
            }),
        Output::Markdown => Err(Error::Usage(
            "-o markdown is for `kubectl cmset plan`; use table, json or yaml".to_string(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Row {
        config_map: &'static str,
        revision: Option<i64>,
    }

    #[test]
    fn json_and_yaml() {
        let rows = [Row {
            config_map: "app-abc",
            revision: Some(2),
        }];
        assert_eq!(structured(&rows, Output::Table).unwrap(), None);
        assert_eq!(
            structured(&rows, Output::Json).unwrap().unwrap(),
            "[\n  {\n    \"configMap\": \"app-abc\",\n    \"revision\": 2\n  }\n]\n"
        );
        assert_eq!(
            structured(&rows, Output::Yaml).unwrap().unwrap(),
            "- configMap: app-abc\n  revision: 2\n"
        );
    }
}
