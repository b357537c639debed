//! How a node's measured energy is attributed to the jobs on it (the rule sched/energy's
//! per-job accounting applies to slurmctld's node energy readings, see
//! slurm-sched-plugin/src/accounting.rs): each interval's energy is split over the node's GPUs
//! equally, each GPU's part over the jobs holding it (a GPU shared through `gres/shard` splits
//! equally; an idle GPU's part goes to no job) and the part of the interval each job ran; a
//! node without GPUs is split by CPUs.

use std::collections::BTreeMap;

/// A node's counter at its last reading.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    pub consumed_j: u64,
    pub current_w: u32,
    pub poll_time: i64,
}

/// Energy between two readings of a node (J): the counter's difference, or, when the counter
/// did not move although the node drew power (a plugin that reports power but keeps no
/// counter), the mean of the two power readings over the interval. `None` when the counter
/// went back (restarted).
pub fn interval_energy_j(prev: Reading, now: Reading) -> Option<(f64, bool)> {
    if now.consumed_j < prev.consumed_j {
        return None;
    }
    let counted = (now.consumed_j - prev.consumed_j) as f64;
    if counted > 0.0 || (prev.current_w == 0 && now.current_w == 0) {
        return Some((counted, false));
    }
    let seconds = (now.poll_time - prev.poll_time).max(0) as f64;
    Some(((f64::from(prev.current_w) + f64::from(now.current_w)) / 2.0 * seconds, true))
}

/// A running job on one node, for the split.
#[derive(Debug, Clone, PartialEq)]
pub struct Holder {
    pub job: u32,
    pub start_unix_s: i64,
    /// GPU indices it holds there (whole or through shards).
    pub gpus: Vec<u32>,
    pub cpus: u32,
}

/// Joules of `delta_j`, measured over `[from_s, to_s]` on a node with `node_gpus` GPUs and
/// `node_cpus` CPUs, that each holder used, and the seconds of the interval it ran.
pub fn split(delta_j: f64, from_s: i64, to_s: i64, node_gpus: u32, node_cpus: u32, holders: &[Holder]) -> Vec<(u32, f64, f64)> {
    let span_s = (to_s - from_s) as f64;
    if span_s <= 0.0 || !delta_j.is_finite() || delta_j <= 0.0 {
        return Vec::new();
    }
    let ran_s = |h: &Holder| (to_s - h.start_unix_s.max(from_s)).max(0) as f64;
    let mut out: Vec<(u32, f64, f64)> = Vec::new();
    if node_gpus > 0 {
        let mut on_gpu: BTreeMap<u32, Vec<&Holder>> = BTreeMap::new();
        for h in holders {
            for &g in &h.gpus {
                if g < node_gpus {
                    on_gpu.entry(g).or_default().push(h);
                }
            }
        }
        let per_gpu_j = delta_j / f64::from(node_gpus);
        for jobs in on_gpu.values() {
            for h in jobs {
                let j = per_gpu_j / jobs.len() as f64 * ran_s(h) / span_s;
                match out.iter_mut().find(|o| o.0 == h.job) {
                    Some(o) => o.1 += j,
                    None => out.push((h.job, j, ran_s(h))),
                }
            }
        }
    } else if node_cpus > 0 {
        for h in holders.iter().filter(|h| h.cpus > 0) {
            let j = delta_j * f64::from(h.cpus.min(node_cpus)) / f64::from(node_cpus) * ran_s(h) / span_s;
            out.push((h.job, j, ran_s(h)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(job: u32, start: i64, gpus: &[u32]) -> Holder {
        Holder { job, start_unix_s: start, gpus: gpus.to_vec(), cpus: 4 }
    }

    #[test]
    fn interval_energy_from_the_counter_else_from_power() {
        let r = |consumed_j, current_w, poll_time| Reading { consumed_j, current_w, poll_time };
        assert_eq!(interval_energy_j(r(100, 50, 0), r(600, 50, 10)), Some((500.0, false)));
        assert_eq!(interval_energy_j(r(100, 100, 0), r(100, 200, 10)), Some((1500.0, true)));
        assert_eq!(interval_energy_j(r(100, 0, 0), r(100, 0, 10)), Some((0.0, false)));
        assert_eq!(interval_energy_j(r(600, 50, 0), r(100, 50, 10)), None);
    }

    #[test]
    fn energy_is_split_by_gpus_held() {
        // 4 GPUs, 4000 J over 100 s: 1000 J per GPU; job 1 holds 2, job 2 holds 1, one idle.
        let out = split(4000.0, 0, 100, 4, 32, &[h(1, -50, &[0, 1]), h(2, -50, &[3])]);
        assert_eq!(out, vec![(1, 2000.0, 100.0), (2, 1000.0, 100.0)]);
    }

    #[test]
    fn a_job_started_within_the_interval_gets_its_part() {
        let out = split(4000.0, 0, 100, 4, 32, &[h(1, 75, &[0])]);
        assert_eq!(out, vec![(1, 250.0, 25.0)]);
    }

    #[test]
    fn a_shared_gpu_splits_among_its_jobs() {
        let out = split(2000.0, 0, 100, 2, 32, &[h(1, 0, &[0]), h(2, 0, &[0]), h(3, 0, &[1])]);
        assert_eq!(out, vec![(1, 500.0, 100.0), (2, 500.0, 100.0), (3, 1000.0, 100.0)]);
    }

    #[test]
    fn cpu_nodes_split_by_cpus_and_nothing_from_nothing() {
        let out = split(800.0, 0, 100, 0, 8, &[Holder { job: 9, start_unix_s: 0, gpus: vec![], cpus: 2 }]);
        assert_eq!(out, vec![(9, 200.0, 100.0)]);
        assert!(split(0.0, 0, 100, 4, 8, &[h(1, 0, &[0])]).is_empty());
        assert!(split(10.0, 100, 100, 4, 8, &[h(1, 0, &[0])]).is_empty());
        assert!(split(f64::NAN, 0, 100, 4, 8, &[h(1, 0, &[0])]).is_empty());
    }
}
