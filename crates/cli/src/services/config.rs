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

/// Where the home came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HomeSource {
    /// `HERMES_HOME`.
    Variable,
    /// The default, `$XDG_DATA_HOME/hermes` (`~/.local/share/hermes`).
    Default,
    /// `~/.hermes`, where homes were made before hermes moved out of the way of upstream Hermes
    /// Agent (whose home is `~/.hermes` too): used while it holds hermes' files and the default
    /// does not, until `hermes home migrate` moves them.
    Legacy,
}

impl HomeSource {
    /// Its name in `hermes home --json`.
    pub fn as_str(self) -> &'static str {
        match self {
            HomeSource::Variable => "HERMES_HOME",
            HomeSource::Default => "default",
            HomeSource::Legacy => "legacy",
        }
    }
}

/// The home directory name under `$XDG_DATA_HOME` (`~/.local/share`).
const DATA_DIR_NAME: &str = "hermes";
/// The home of older versions, under `$HOME`.
pub const LEGACY_DIR_NAME: &str = ".hermes";

/// `$HERMES_HOME`, else the default home (see [`home_source`]), made absolute against the
/// working directory: the processes hermes starts (children in another `--cwd`, headless hosts)
/// are handed this path, so a relative `HERMES_HOME` names the same home for all of them.
pub fn home_dir(env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<PathBuf> {
    home_source(env).map(|(dir, _)| dir)
}

/// The home and where it came from: `$HERMES_HOME`; else `$XDG_DATA_HOME/hermes` (an absolute
/// `XDG_DATA_HOME`, else `~/.local/share/hermes`), unless only `~/.hermes` holds hermes' files
/// (a home made by an older version), which is then used as it is.
pub fn home_source(env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<(PathBuf, HomeSource)> {
    let set = |name: &str| env(name).filter(|v| !v.is_empty());
    let (dir, source) = if let Some(home) = set("HERMES_HOME") {
        (PathBuf::from(home), HomeSource::Variable)
    } else if let Some(home) = set("HOME") {
        let default = default_home(&PathBuf::from(&home), set("XDG_DATA_HOME"));
        let legacy = PathBuf::from(home).join(LEGACY_DIR_NAME);
        if !holds_a_home(&default) && holds_a_home(&legacy) {
            (legacy, HomeSource::Legacy)
        } else {
            (default, HomeSource::Default)
        }
    } else {
        return Err(fail(
            Code::Usage,
            "neither HERMES_HOME nor HOME is set; set HERMES_HOME to a directory hermes may use",
        ));
    };
    let dir = std::path::absolute(&dir).map_err(|e| {
        fail(
            Code::Usage,
            format!(
                "cannot make the home {} absolute: {e}; set HERMES_HOME to an absolute path",
                dir.display()
            ),
        )
    })?;
    Ok((dir, source))
}

/// The default home for the user whose home directory is `home`.
pub fn default_home(home: &Path, xdg_data_home: Option<String>) -> PathBuf {
    match xdg_data_home.map(PathBuf::from) {
        // The XDG rule: a relative value is to be ignored.
        Some(data) if data.is_absolute() => data.join(DATA_DIR_NAME),
        _ => home.join(".local/share").join(DATA_DIR_NAME),
    }
}

/// Whether `dir` holds a hermes home: its ledger or its settings (a file upstream Hermes Agent,
/// whose settings are `config.yaml`, never writes).
pub fn holds_a_home(dir: &Path) -> bool {
    dir.join("ledger.redb").is_file() || dir.join("config.toml").is_file()
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
    fn the_default_home_is_our_own_unless_only_an_old_one_exists() {
        let user = tempfile::tempdir().expect("tempdir");
        let home = user.path().to_str().expect("utf-8").to_owned();
        let env = |xdg: Option<&'static str>| {
            let home = home.clone();
            move |name: &str| match name {
                "HOME" => Some(home.clone()),
                "XDG_DATA_HOME" => xdg.map(str::to_owned),
                _ => None,
            }
        };
        let default = user.path().join(".local/share/hermes");
        assert_eq!(
            home_source(&env(None)).expect("home"),
            (default.clone(), HomeSource::Default)
        );
        assert_eq!(
            home_source(&env(Some("/data"))).expect("home").0,
            PathBuf::from("/data/hermes")
        );
        // A relative XDG_DATA_HOME is ignored, as the XDG rules say.
        assert_eq!(home_source(&env(Some("rel"))).expect("home").0, default);
        // Upstream Hermes Agent's home alone is not ours.
        let legacy = user.path().join(".hermes");
        std::fs::create_dir_all(&legacy).expect("mkdir");
        std::fs::write(legacy.join("config.yaml"), "model: {}\n").expect("write");
        assert_eq!(
            home_source(&env(None)).expect("home").1,
            HomeSource::Default
        );
        // A home an older hermes made there is used as it is, until the default holds one.
        std::fs::write(legacy.join("ledger.redb"), "").expect("write");
        assert_eq!(
            home_source(&env(None)).expect("home"),
            (legacy, HomeSource::Legacy)
        );
        std::fs::create_dir_all(&default).expect("mkdir");
        std::fs::write(default.join("config.toml"), "").expect("write");
        assert_eq!(
            home_source(&env(None)).expect("home").1,
            HomeSource::Default
        );
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
