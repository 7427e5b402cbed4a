//! Development tool, never shipped.
