//! Parasol: an on-premises server for the enforcement (`/1.0/`) and management (`/v1/`)
//! interfaces of a cloud DNS-security service. `main.rs` parses arguments and calls into here.

pub mod access;
pub mod arena;
pub mod budget;
pub mod bulk;
pub mod cli;
pub mod config;
pub mod console;
pub mod datadir;
pub mod demo;
pub mod enforcement;
pub mod error;
pub mod export;
pub mod feeds;
pub mod histogram;
pub mod host;
pub mod http;
pub mod ids;
pub mod json;
pub mod management;
pub mod metrics;
pub mod names;
pub mod netinfo;
pub mod own;
pub mod page_cache;
pub mod ratelimit;
pub mod reputation;
pub mod router;
pub mod rpz;
pub mod secrets;
pub mod server;
pub mod slots;
pub mod state;
pub mod store;
#[cfg(test)]
mod testdir;
pub mod timefmt;
pub mod tls;
pub mod transport;
pub mod trim;
