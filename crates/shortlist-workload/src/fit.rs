//! Fitting a synthetic trace to a source trace (in progress).
