//! acct_gather_energy/nvml (stub while being written).
