//! One poll: the program's events from the VTN (OpenLEADR's client), translated, checked and
//! written to the cap file when they say something new.

use crate::cap_file;
use crate::config::Config;
use crate::translate;
use openleadr_client::{Client, ClientCredentials, Filter, VirtualEndNode};
use openleadr_wire::event::EventRequest;

pub const LOG: &str = "slurm-energy-openadr";

pub fn client(config: &Config) -> Client<VirtualEndNode> {
    let credentials = config.credentials.as_ref().map(|(id, secret)| ClientCredentials::new(id.clone(), secret.clone()));
    match &config.oauth_token_url {
        Some(token_url) => Client::with_details(config.vtn_url.clone(), token_url.clone(), reqwest::Client::new(), credentials),
        None => Client::with_url(config.vtn_url.clone(), credentials),
    }
}

/// The program's events, as (id, content).
pub async fn fetch_events(client: &Client<VirtualEndNode>, program_name: &str) -> Result<Vec<(String, EventRequest)>, String> {
    let programs = client.get_program_list(Filter::none()).await.map_err(|e| format!("listing programs: {e}"))?;
    let program = programs
        .iter()
        .find(|p| p.content().program_name == program_name)
        .ok_or_else(|| format!("the VTN has no program named '{program_name}' ({} programs visible)", programs.len()))?;
    let events = program.get_event_list(Filter::none()).await.map_err(|e| format!("listing events of '{program_name}': {e}"))?;
    Ok(events.iter().map(|e| (e.id().to_string(), e.content().clone())).collect())
}

/// What a poll did.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    Written,
    Unchanged,
}

/// Fetch, translate, validate, write. On any error the file is left as it is.
pub async fn poll_once(config: &Config, client: &Client<VirtualEndNode>, now_s: i64) -> Result<Outcome, String> {
    let events = fetch_events(client, &config.program_name).await?;
    let (lines, cap_events) = translate::events_to_lines(&events, &config.rule, now_s)?;
    let old = std::fs::read_to_string(&config.cap_file).ok();
    if old.as_deref().map(cap_file::schedule_key) == Some(cap_file::schedule_key(&lines)) {
        println!(
            "{LOG}: program '{}': {} events ({cap_events} with {}), cap schedule unchanged",
            config.program_name,
            events.len(),
            config.rule.payload_type
        );
        return Ok(Outcome::Unchanged);
    }
    let text = format!(
        "# written by slurm-energy-openadr from OpenADR program '{}' ({} events, {cap_events} with {}), baseline {}\n{lines}",
        config.program_name,
        events.len(),
        config.rule.payload_type,
        if config.rule.baseline_cap_w > 0.0 { format!("{} W", config.rule.baseline_cap_w) } else { "none".into() },
    );
    cap_file::write_atomic(&config.cap_file, &text)?;
    println!(
        "{LOG}: program '{}': wrote {} ({} events, {cap_events} with {}): {}",
        config.program_name,
        config.cap_file.display(),
        events.len(),
        config.rule.payload_type,
        lines.trim_end().replace('\n', "; ")
    );
    Ok(Outcome::Written)
}
