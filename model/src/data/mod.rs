//! Loaders for the measured reference data (`../shared/data` or a site's own files).
