//! Writing a spec: its format (`--format`, else the file name's) and the atomic write of the
//! file, which container runtimes watching their CDI directories never see half-written.
#![forbid(unsafe_code)]

use std::fmt;
use std::path::Path;
use std::str::FromStr;

/// The format of a spec file (`--format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecFormat {
    /// JSON (also valid YAML).
    Json,
    /// YAML.
    Yaml,
}

impl SpecFormat {
    /// Every format.
    pub const ALL: [SpecFormat; 2] = [SpecFormat::Json, SpecFormat::Yaml];

    /// `"json"` or `"yaml"`.
    pub fn name(self) -> &'static str {
        match self {
            SpecFormat::Json => "json",
            SpecFormat::Yaml => "yaml",
        }
    }

    /// What it is, for `--help`.
    pub fn help(self) -> &'static str {
        match self {
            SpecFormat::Json => "JSON (also valid YAML)",
            SpecFormat::Yaml => "YAML",
        }
    }
}

impl fmt::Display for SpecFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// A format name that is not one of [`SpecFormat::ALL`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownSpecFormat;

impl fmt::Display for UnknownSpecFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("expected json or yaml")
    }
}

impl std::error::Error for UnknownSpecFormat {}

impl FromStr for SpecFormat {
    type Err = UnknownSpecFormat;

    /// `json` or `yaml`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SpecFormat::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or(UnknownSpecFormat)
    }
}

/// The extensions container runtimes load from their CDI directories.
const LOADED_EXTENSIONS: [&str; 2] = ["json", "yaml"];

/// The format to write: `--format`, else JSON for a `.json` file, else YAML; and a warning
/// when runtimes would not load the file by its name.
///
/// # Errors
/// `--format yaml` with a `.json` file (YAML is not JSON; JSON in a `.yaml` file is fine:
/// JSON is YAML).
pub fn choose_format(
    format: Option<SpecFormat>,
    output: Option<&Path>,
) -> Result<(SpecFormat, Option<String>), String> {
    let ext = output.and_then(|p| p.extension()).and_then(|e| e.to_str());
    let chosen = match (format, ext) {
        (Some(SpecFormat::Yaml), Some("json")) => {
            return Err(format!(
                "--format yaml, but {} ends in .json: name it .yaml, or leave out --format",
                output.map(|p| p.display().to_string()).unwrap_or_default()
            ))
        }
        (Some(f), _) => f,
        (None, Some("json")) => SpecFormat::Json,
        (None, _) => SpecFormat::Yaml,
    };
    let warning = match output {
        Some(p) if !ext.is_some_and(|e| LOADED_EXTENSIONS.contains(&e)) => Some(format!(
            "{} does not end in .json or .yaml: container runtimes load only those from their \
             CDI directories (/etc/cdi, /var/run/cdi)",
            p.display()
        )),
        _ => None,
    };
    Ok((chosen, warning))
}

pub use crate::files::{write_atomically, WriteError};
