//! Storage faults through the store's interface.
