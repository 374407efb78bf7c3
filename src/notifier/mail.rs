//! `--notify mailto:ADDR` (docs/BEHAVIOUR.md "Being told"): a message as
//! an e-mail, through the relay `GPUSCHED_SMTP` names (`HOST:PORT`, plain
//! SMTP to a local or trusted relay), else the system's `sendmail`. The
//! same queue, retries and once-per-outcome rule as a webhook: a mail
//! the relay refused is tried again. Built with the `lettre` crate.

use super::Message;
use lettre::Transport;

/// The variable naming an SMTP relay (`HOST:PORT`, or `HOST` for port 25).
pub const SMTP_VAR: &str = "GPUSCHED_SMTP";

/// Where `sendmail` is looked for when no relay is named.
const SENDMAIL: &str = "/usr/sbin/sendmail";

/// The address of a `mailto:` target, if `target` is one.
pub fn address(target: &str) -> Option<&str> {
    target.strip_prefix("mailto:")
}

/// Checks a `mailto:` target at start.
///
/// Errors: the address is not one, or there is nothing to send mail
/// through (no relay named, no `sendmail`).
pub fn check(target: &str) -> Result<(), String> {
    let address = address(target).unwrap_or(target);
    address
        .parse::<lettre::Address>()
        .map_err(|e| format!("--notify {target}: not an e-mail address ({e})"))?;
    if std::env::var_os(SMTP_VAR).is_none() && !std::path::Path::new(SENDMAIL).exists() {
        return Err(format!(
            "--notify {target}: no way to send mail here: set {SMTP_VAR}=HOST:PORT (an SMTP relay) or install a sendmail ({SENDMAIL})"
        ));
    }
    Ok(())
}

/// Sends `message` to `address`; whether it went, or why not.
pub fn send(address: &str, message: &Message) -> Result<(), String> {
    let to: lettre::Address = address.parse().map_err(|e| format!("{e}"))?;
    let from: lettre::Address = format!("gpusched@{}", sender_host(&message.scheduler.host))
        .parse()
        .or_else(|_| "gpusched@localhost".parse())
        .map_err(|e| format!("{e}"))?;
    let subject = format!(
        "gpusched: {}",
        crate::console::shorten(message.text.lines().next().unwrap_or(""), 120)
    );
    let body = format!(
        "{}\n\n{}\n",
        message.text,
        serde_json::to_string_pretty(message).map_err(|e| e.to_string())?
    );
    let mail = lettre::Message::builder()
        .from(lettre::message::Mailbox::new(None, from))
        .to(lettre::message::Mailbox::new(None, to))
        .subject(subject)
        .message_id(Some(format!(
            "<{}@gpusched>",
            message.id.replace(['/', '#'], ".")
        )))
        .header(lettre::message::header::ContentType::TEXT_PLAIN)
        .body(body)
        .map_err(|e| e.to_string())?;
    match std::env::var(SMTP_VAR) {
        Ok(relay) => {
            let (host, port) = match relay.rsplit_once(':') {
                Some((host, port)) => (
                    host.to_string(),
                    port.parse()
                        .map_err(|_| format!("{SMTP_VAR}={relay}: bad port"))?,
                ),
                None => (relay.clone(), 25),
            };
            lettre::SmtpTransport::builder_dangerous(host)
                .port(port)
                .timeout(Some(super::POST_TIMEOUT))
                .build()
                .send(&mail)
                .map(|_| ())
                .map_err(|e| format!("the relay {relay}: {e}"))
        }
        Err(_) => lettre::SendmailTransport::new_with_command(SENDMAIL)
            .send(&mail)
            .map_err(|e| format!("{SENDMAIL}: {e}")),
    }
}

/// A host name as a mail domain: the box's name, or `localhost`.
fn sender_host(host: &str) -> &str {
    if !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
    {
        host
    } else {
        "localhost"
    }
}
