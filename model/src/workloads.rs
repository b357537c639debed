//! Workload names: how a user's `--energy-tag` (or a trace's job type) relates to the measured
//! data sets, which name the same kind of model differently.
//!
//! The tables are assumptions, stated here once: a Gavel "ResNet-50" job responds to the GPU
//! clock like Zeus's ImageNet/ResNet-50 sweeps and to CPUs like Synergy's `res50`. Where no data
//! set has a close relative, the class is `None` and the generic curve applies.

/// Model family of a Gavel job type: `"ResNet-50 (batch size 64)"` -> `"ResNet-50"`.
pub fn gavel_family(job_type: &str) -> &str {
    job_type.split(" (batch size").next().unwrap_or(job_type).trim()
}

/// Canonical lower-case family name for a tag (`ResNet-50`, `resnet50` and `res50` are one).
pub fn canonical_family(tag: &str) -> String {
    let t: String = gavel_family(tag).chars().filter(|c| c.is_ascii_alphanumeric()).collect::<String>().to_ascii_lowercase();
    match t.as_str() {
        "res50" | "resnet50" => "resnet50".into(),
        "res18" | "resnet18" => "resnet18".into(),
        "lm" | "lstm" | "languagemodel" => "lm".into(),
        "recommendation" | "ncf" | "recsys" => "recommendation".into(),
        "transformer" | "bert" | "bertbaseuncased" => "transformer".into(),
        other => other.to_string(),
    }
}

/// Zeus network whose clock/power response stands in for a family.
pub fn zeus_network(family: &str) -> Option<&'static str> {
    match canonical_family(family).as_str() {
        "resnet50" | "resnet18" | "cyclegan" => Some("resnet50"),
        "a3c" | "shufflenet" | "shufflenetv2" | "mobilenet" => Some("shufflenetv2"),
        "transformer" => Some("bert_base_uncased"),
        "lm" | "deepspeech" | "deepspeech2" | "gnmt" => Some("deepspeech2"),
        "recommendation" => Some("ncf"),
        _ => None,
    }
}

/// Synergy model whose CPU sensitivity stands in for a family.
pub fn synergy_model(family: &str) -> Option<&'static str> {
    match canonical_family(family).as_str() {
        "resnet50" => Some("res50"),
        "resnet18" => Some("res18"),
        "transformer" => Some("transformer"),
        "lm" => Some("lstm"),
        "cyclegan" => Some("vae"),
        "a3c" => Some("mobilenet"),
        "shufflenet" | "shufflenetv2" => Some("shufflenet"),
        "mobilenet" => Some("mobilenet"),
        "gnmt" => Some("gnmt"),
        "alexnet" => Some("alexnet"),
        "deepspeech" | "deepspeech2" => Some("deepspeech"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_map_across_data_sets() {
        assert_eq!(gavel_family("ResNet-50 (batch size 64)"), "ResNet-50");
        assert_eq!(canonical_family("ResNet-50 (batch size 64)"), "resnet50");
        assert_eq!(zeus_network("LM (batch size 20)"), Some("deepspeech2"));
        assert_eq!(synergy_model("res50"), Some("res50"));
        assert_eq!(zeus_network("unknown-model"), None);
    }
}
