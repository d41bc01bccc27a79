//! Timeline plots.
