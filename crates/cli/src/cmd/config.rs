//! `hermes config show`: every setting in force and where it came from — its default,
//! `config.toml`, or a `HERMES_<SECTION>_<KEY>` variable — as the settings crate recorded it
//! while reading them. A ledger URL's password is masked there, so nothing here can print one.

use hermes_settings::{Effective, Source, Value};
use serde_json::{Value as Json, json};

use crate::args::ConfigCommand;
use crate::services::config::{self, home_dir};
use crate::services::exit::Code;
use crate::services::home::env_var;
use crate::services::output;

/// Runs a `config` subcommand.
pub fn run(command: ConfigCommand) -> anyhow::Result<Code> {
    let ConfigCommand::Show { json } = command;
    let file = home_dir(&env_var)?.join("config.toml");
    let (_, sources) = config::load_with_sources(&file, config::environment())?;
    let settings = sources.effective();
    if json {
        output::print_json(&json!({
            "config_file": file.display().to_string(),
            "config_file_exists": file.is_file(),
            "settings": settings.iter().map(entry_json).collect::<Vec<_>>(),
        }))?;
        return Ok(Code::Ok);
    }
    let present = if file.is_file() { "" } else { " (not present)" };
    let mut text = format!("config file: {}{present}\n", file.display());
    let lines: Vec<(String, String)> = settings
        .iter()
        .map(|e| (format!("{} = {}", e.key, e.value), source_words(&e.source)))
        .collect();
    let width = lines.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
    for (line, source) in lines {
        text.push_str(&format!("{line:<width$}  {source}\n"));
    }
    output::print(&text)?;
    Ok(Code::Ok)
}

/// `default`, `file PATH` or `environment NAME`.
fn source_words(source: &Source) -> String {
    match source {
        Source::Default => "default".to_owned(),
        Source::File(path) => format!("file {path}"),
        Source::Environment(name) => format!("environment {name}"),
    }
}

/// `{"key", "value", "source"}`, with `"file"` or `"variable"` saying which.
fn entry_json(e: &Effective) -> Json {
    let value = match &e.value {
        Value::Unset => Json::Null,
        Value::Number(n) if n.fract() == 0.0 && n.abs() < 9e15 => json!(*n as i64),
        Value::Number(n) => json!(n),
        Value::Text(t) => json!(t),
    };
    let mut entry = json!({"key": e.key, "value": value, "source": e.source.kind()});
    match &e.source {
        Source::Default => {}
        Source::File(path) => entry["file"] = json!(path),
        Source::Environment(name) => entry["variable"] = json!(name),
    }
    entry
}
