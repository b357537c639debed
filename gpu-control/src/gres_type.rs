//! The GRES type name Slurm gives a GPU it finds through NVML (`AutoDetect=nvml`): the product
//! name in lower case with blanks as `_` (`Tesla V100-SXM2-32GB` -> `tesla_v100-sxm2-32gb`).
//! Here, not in the GPU plugin, so that tools that write slurm.conf (the demo) name node GRES
//! the way the plugin will report them, without building against Slurm.

/// NVML's product name as a Slurm GRES type.
pub fn slurm_type_name(nvml_name: &str) -> String {
    nvml_name.trim().chars().map(|c| if c == ' ' { '_' } else { c.to_ascii_lowercase() }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn product_names_become_lower_case_types() {
        assert_eq!(slurm_type_name("Tesla V100-SXM2-16GB"), "tesla_v100-sxm2-16gb");
        assert_eq!(slurm_type_name(" NVIDIA A100-SXM4-40GB "), "nvidia_a100-sxm4-40gb");
    }
}
