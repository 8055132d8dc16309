//! A login module that reads Portcullis' upstream password from a file and reads it again
//! (through the host's refresh scheduler) every `check_interval_ms`: rotate the password on the
//! brokers and in the file, and upstream connections authenticate — and re-authenticate their
//! sessions — with the new one, without dropping any client. The host runs the mechanism's client
//! (SCRAM or PLAIN) with the user name and password this module hands over.
//!
//! ```toml
//! [upstream.login]
//! plugin = "file-password"
//!
//! [plugins.config.file-password]
//! username = "portcullis"
//! password_file = "/etc/portcullis/upstream-password"
//! mechanism = "SCRAM-SHA-512"
//! check_interval_ms = 60000
//! ```
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use portcullis_plugin_api::login::{ClientExchange, ExpiringCredential, LoginError, LoginModule};
use portcullis_plugin_api::secret::Secret;
use portcullis_plugin_api::{Host, Plugin, PluginError};

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    username: String,
    password_file: PathBuf,
    mechanism: String,
    check_interval_ms: i64,
}

pub struct FilePassword {
    config: Config,
    host: Host,
    /// The password and when it was read.
    pw: Mutex<(Secret, i64)>,
}

fn read(path: &Path) -> Result<Secret, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Secret::new(text.trim_end_matches(['\r', '\n'])))
}

impl Plugin for FilePassword {
    const NAME: &'static str = "file-password";
    type Config = Config;

    fn new(config: Config, host: &Host) -> Result<Self, PluginError> {
        let password = read(&config.password_file).map_err(PluginError::startup)?;
        let (pw, host) = (Mutex::new((password, host.now_ms())), host.clone());
        Ok(Self { config, host, pw })
    }
}

impl LoginModule for FilePassword {
    fn mechanism(&self) -> &str {
        &self.config.mechanism
    }
    /// "Expires" after the check interval, so that the host's scheduler calls `refresh`.
    fn credential(&self) -> ExpiringCredential {
        let read_at = self.pw.lock().map_or(0, |pw| pw.1);
        let expiry = read_at + self.config.check_interval_ms;
        ExpiringCredential::expiring(&self.config.username, read_at, expiry)
    }
    fn refresh(&self) -> Result<ExpiringCredential, LoginError> {
        let password = read(&self.config.password_file).map_err(LoginError)?;
        let mut pw = self.pw.lock().map_err(|_| LoginError("poisoned".into()))?;
        if pw.0 != password {
            self.host.info("the upstream password changed");
        }
        *pw = (password, self.host.now_ms());
        drop(pw);
        Ok(self.credential())
    }
    fn start(&self) -> Result<ClientExchange, LoginError> {
        let pw = self.pw.lock().map_err(|_| LoginError("poisoned".into()))?;
        let (username, password) = (self.config.username.clone(), pw.0.clone());
        Ok(ClientExchange::Password { username, password })
    }
}

portcullis_plugin_api::export_plugins!(login_module: FilePassword);
