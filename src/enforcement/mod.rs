//! The enforcement interface (`/1.0/...`): event validation, domain normalisation, acceptance
//! checks and the request handlers.

pub mod domain;
pub mod event;
pub mod handlers;
