//! Where the settings come from: `$HERMES_HOME/config.toml` and the `HERMES_<SECTION>_<KEY>`
//! environment, read into `hermes_settings::Settings` (which holds every key, default and bound).

use std::path::{Path, PathBuf};

use hermes_settings::{Settings, SettingsError, Sources};

use crate::services::exit::{Code, fail};

/// Reads `file` (if it exists) and `env`; a bad file, key or value is a usage error naming it.
pub fn load<I>(file: &Path, env: I) -> anyhow::Result<Settings>
where
    I: IntoIterator<Item = (String, String)>,
{
    load_with_sources(file, env).map(|(settings, _)| settings)
}

/// [`load`], and where each setting came from.
pub fn load_with_sources<I>(file: &Path, env: I) -> anyhow::Result<(Settings, Sources)>
where
    I: IntoIterator<Item = (String, String)>,
{
    let text = match std::fs::read_to_string(file) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(fail(
                Code::Usage,
                format!("cannot read config {}: {e}", file.display()),
            ));
        }
    };
    let origin = file.display().to_string();
    Settings::load_with_sources(text.as_deref().map(|t| (origin.as_str(), t)), env)
        .map_err(|e: SettingsError| fail(Code::Usage, e.to_string()))
}

/// The process environment, every variable whose name and value are UTF-8.
pub fn environment() -> impl Iterator<Item = (String, String)> {
    std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
}

/// `$HERMES_HOME`, else `~/.hermes`, made absolute against the working directory: the processes
/// hermes starts (children in another `--cwd`, headless hosts) are handed this path, so a
/// relative `HERMES_HOME` names the same home for all of them.
pub fn home_dir(env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<PathBuf> {
    let dir = if let Some(home) = env("HERMES_HOME").filter(|h| !h.is_empty()) {
        PathBuf::from(home)
    } else if let Some(home) = env("HOME").filter(|h| !h.is_empty()) {
        PathBuf::from(home).join(".hermes")
    } else {
        return Err(fail(
            Code::Usage,
            "neither HERMES_HOME nor HOME is set; set HERMES_HOME to a directory hermes may use",
        ));
    };
    std::path::absolute(&dir).map_err(|e| {
        fail(
            Code::Usage,
            format!(
                "cannot make the home {} absolute: {e}; set HERMES_HOME to an absolute path",
                dir.display()
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_file_is_a_usage_error_naming_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("config.toml");
        std::fs::write(&file, "[delegation]\nmax_concurrent_children = 0\n").expect("write");
        let err = load(&file, std::iter::empty()).expect_err("refused");
        assert_eq!(crate::services::exit::code_of(&err), Code::Usage);
        assert!(err.to_string().contains("config.toml"), "{err}");
        assert!(err.to_string().contains("max_concurrent_children"), "{err}");
        let missing = load(&dir.path().join("nope.toml"), std::iter::empty()).expect("defaults");
        assert_eq!(missing, Settings::default());
    }

    #[test]
    fn a_relative_home_is_made_absolute_once() {
        let cwd = std::env::current_dir().expect("cwd");
        let env = |name: &str| (name == "HERMES_HOME").then(|| "relhome".to_owned());
        assert_eq!(home_dir(&env).expect("home"), cwd.join("relhome"));
        let abs = |name: &str| (name == "HERMES_HOME").then(|| "/srv/h".to_owned());
        assert_eq!(home_dir(&abs).expect("home"), PathBuf::from("/srv/h"));
    }

    #[test]
    fn an_unknown_override_of_our_sections_is_a_usage_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let env = [("HERMES_DELEGATION_BOGUS".to_owned(), "1".to_owned())];
        let err = load(&dir.path().join("config.toml"), env).expect_err("refused");
        assert_eq!(crate::services::exit::code_of(&err), Code::Usage);
        assert!(err.to_string().contains("HERMES_DELEGATION_BOGUS"), "{err}");
    }
}
