//! Statistics over seeds: a metric's mean with the half-width of its 95 % confidence interval
//! (Student's t, since ten or so seeds are far from a normal sample), and the same for paired
//! ratios and differences of one policy against a baseline run with the same seed.
//!
//! Pairing matters here: a seed fixes the job types, time limits and hints of every policy, so
//! most of the seed-to-seed spread (a burst that queues thousands of jobs or not) cancels in the
//! per-seed ratio. Never pools runs of different seeds into one ratio.

use serde::Serialize;

/// Mean of a sample and the half-width of its 95 % confidence interval (`None` with fewer than
/// two values: one seed says nothing about the spread).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Estimate {
    pub mean: f64,
    pub ci95: Option<f64>,
}

/// Two-sided 97.5 % quantiles of Student's t for 1..=30 degrees of freedom (standard table).
const T975: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080,
    2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
];

/// Student's t quantile for a 95 % two-sided interval with `df` degrees of freedom (`df >= 1`).
pub fn t975(df: usize) -> f64 {
    match df {
        0 => f64::INFINITY,
        1..=30 => T975[df - 1],
        31..=40 => 2.021,
        41..=60 => 2.000,
        61..=120 => 1.980,
        _ => 1.960,
    }
}

impl Estimate {
    pub fn of(values: &[f64]) -> Estimate {
        let n = values.len();
        if n == 0 {
            return Estimate { mean: f64::NAN, ci95: None };
        }
        let mean = values.iter().sum::<f64>() / n as f64;
        if n < 2 {
            return Estimate { mean, ci95: None };
        }
        let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        Estimate { mean, ci95: Some(t975(n - 1) * (var / n as f64).sqrt()) }
    }

    /// `mean ± ci` with `decimals`, or the mean alone when there is no interval.
    pub fn show(&self, decimals: usize) -> String {
        match self.ci95 {
            Some(ci) => format!("{:.*} ± {:.*}", decimals, self.mean, decimals, ci),
            None => format!("{:.*}", decimals, self.mean),
        }
    }

    /// The 95 % interval excludes 0 (a paired difference that is significant at 5 %); false
    /// without an interval.
    pub fn excludes_zero(&self) -> bool {
        self.ci95.is_some_and(|ci| self.mean.is_finite() && self.mean.abs() > ci)
    }

    pub fn scaled(&self, factor: f64) -> Estimate {
        Estimate { mean: self.mean * factor, ci95: self.ci95.map(|c| c * factor) }
    }
}

/// Per-seed ratios `a[i] / b[i]` and differences `a[i] - b[i]`, each as an [`Estimate`]. Seeds
/// where the baseline is zero are left out of the ratio.
pub fn paired(a: &[f64], b: &[f64]) -> (Estimate, Estimate) {
    let ratios: Vec<f64> = a.iter().zip(b).filter(|(_, y)| **y != 0.0).map(|(x, y)| x / y).collect();
    let diffs: Vec<f64> = a.iter().zip(b).map(|(x, y)| x - y).collect();
    (Estimate::of(&ratios), Estimate::of(&diffs))
}

/// Per seed, the share of the saving from `reference` to `bound` that `policy` reaches:
/// `(reference - policy) / (reference - bound)`; seeds where the bound saves nothing are left
/// out.
pub fn share_of_saving(policy: &[f64], reference: &[f64], bound: &[f64]) -> Estimate {
    let shares: Vec<f64> = policy.iter().zip(reference).zip(bound).filter(|((_, r), b)| (**r - **b).abs() > 0.0).map(|((p, r), b)| (r - p) / (r - b)).collect();
    Estimate::of(&shares)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn share_of_saving_is_paired_per_seed() {
        // Seed 1: reference 100, bound 60, policy 90 -> 25 %; seed 2: 200, 100, 150 -> 50 %.
        let e = share_of_saving(&[90.0, 150.0], &[100.0, 200.0], &[60.0, 100.0]);
        assert!((e.mean - 0.375).abs() < 1e-12, "{e:?}");
        // The ratio of the means would be (150 - 120) / (150 - 80) = 0.43: not what is given.
        // Shares 0.25 and 0.5: sample sd 0.125 x sqrt(2), t(1) = 12.706.
        assert!((e.ci95.expect("two seeds") - 12.706 * 0.125).abs() < 1e-9, "{e:?}");
        assert!(!e.excludes_zero(), "two seeds this far apart resolve nothing");
        assert!(share_of_saving(&[90.0, 180.0, 135.0], &[100.0, 200.0, 150.0], &[60.0, 120.0, 90.0]).excludes_zero());
        assert!(!Estimate { mean: 0.1, ci95: Some(0.2) }.excludes_zero());
        assert!(!Estimate { mean: 0.1, ci95: None }.excludes_zero());
    }

    #[test]
    fn interval_of_a_known_sample() {
        // 2, 4, 4, 4, 5, 5, 7, 9: mean 5, sample sd 2.138, t(7) = 2.365.
        let e = Estimate::of(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert!((e.mean - 5.0).abs() < 1e-12);
        let expected = 2.365 * (32.0_f64 / 7.0).sqrt() / 8.0_f64.sqrt();
        assert!((e.ci95.expect("n > 1") - expected).abs() < 1e-9, "{e:?}");
    }

    #[test]
    fn one_value_has_no_interval() {
        assert_eq!(Estimate::of(&[3.0]), Estimate { mean: 3.0, ci95: None });
        assert!(Estimate::of(&[]).mean.is_nan());
    }

    #[test]
    fn pairing_removes_the_shared_spread() {
        // The seeds move both policies a lot, the policy's effect is a steady 10 %.
        let base = [10.0, 20.0, 30.0, 15.0];
        let pol: Vec<f64> = base.iter().map(|b| b * 0.9).collect();
        let (ratio, diff) = paired(&pol, &base);
        assert!((ratio.mean - 0.9).abs() < 1e-12 && ratio.ci95.expect("n > 1") < 1e-9);
        assert!((diff.mean + 1.875).abs() < 1e-12);
        assert!(Estimate::of(&pol).ci95.expect("n > 1") > 5.0);
    }

    #[test]
    fn t_quantiles_fall_towards_the_normal() {
        assert!(t975(1) > t975(9) && t975(9) > t975(100) && t975(1000) == 1.96);
    }
}
