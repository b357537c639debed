//! gpu/nvml (stub while being written).
