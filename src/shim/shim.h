/*
 * slurm-energy: the C side of the root package's Slurm bindings.
 *
 * What lives here is what bindgen cannot express: the prototypes of the Slurm functions we call
 * turned into *typed* pointers (`__typeof__`), resolved at run time with dlsym(RTLD_DEFAULT)
 * so that the plugin carries no undefined Slurm symbol at all (a Rust cdylib is linked with
 * BIND_NOW; slurmctld-only symbols would otherwise make dlopen fail in every other process),
 * and Slurm's function-like macros (IS_JOB_PENDING, IS_NODE_DRAIN, the logging level check).
 *
 * This header is also bindgen's entry point: it pulls in every internal header the plugins need.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef SLURM_ENERGY_SHIM_H
#define SLURM_ENERGY_SHIM_H

#include "config.h"

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "slurm/slurm.h"
#include "slurm/slurm_errno.h"
#include "slurm/slurm_version.h"

#include "src/common/bitstring.h"
#include "src/common/list.h"
#include "src/common/log.h"
#include "src/common/node_conf.h"
#include "src/common/read_config.h"
#include "src/common/xmalloc.h"
#include "src/common/xstring.h"
#include "src/common/job_resources.h"

#include "src/common/run_in_daemon.h"

#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(23, 2, 0)
#include "src/interfaces/gres.h"
#include "src/interfaces/select.h"
#include "src/interfaces/gpu.h"
#include "src/interfaces/acct_gather_energy.h"
#else
#include "src/common/gres.h"
#include "src/common/select.h"
#include "src/common/gpu.h"
#include "src/common/slurm_acct_gather_energy.h"
#endif

#include "src/slurmctld/slurmctld.h"
#include "src/slurmctld/locks.h"
#include "src/slurmctld/job_scheduler.h"
#include "src/slurmctld/node_scheduler.h"
#include "src/slurmctld/acct_policy.h"
#include "src/slurmctld/fed_mgr.h"
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(24, 11, 0)
#include "src/interfaces/burst_buffer.h"
#else
#include "src/slurmctld/burst_buffer.h"
#endif
#include "src/slurmctld/state_save.h"
#include "src/slurmctld/reservation.h"
#include "src/slurmctld/licenses.h"
#include "src/common/assoc_mgr.h"
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(24, 5, 0)
/* build_batch_step() moved to the step manager. */
#include "src/stepmgr/stepmgr.h"
#endif
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(24, 11, 0)
#include "src/common/job_state_reason.h"
#endif

/*
 * The bundle builds against the release series 22.05, 24.11, 25.11 and 26.05 (build.rs refuses
 * others). Where an interface differs, the newer form is chosen with
 * `SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(24, 11, 0)` here and `cfg(slurm_ge_24_11)` in Rust
 * (likewise 25, 11 / slurm_ge_25_11 and 26, 5 / slurm_ge_26_05).
 */

/* slurm_conf.select_type_param flags: the macros CR_* until 24.11, slurm.h's SELECT_* from 25.11
 * on (same bits). */
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(25, 11, 0)
#define ENERGY_CR_CORE SELECT_CORE
#define ENERGY_CR_SOCKET SELECT_SOCKET
#define ENERGY_CR_MEMORY SELECT_MEMORY
#define ENERGY_CR_LLN SELECT_LLN
#else
#define ENERGY_CR_CORE CR_CORE
#define ENERGY_CR_SOCKET CR_SOCKET
#define ENERGY_CR_MEMORY CR_MEMORY
#define ENERGY_CR_LLN CR_LLN
#endif

/* Slurm's list handles: `List`/`ListIterator` (pointer typedefs) until 23.02, `list_t *` /
 * `list_itr_t *` after; the same types under one name in every release. */
typedef __typeof__(list_create(NULL)) energy_list_t;
typedef __typeof__(list_iterator_create(NULL)) energy_list_itr_t;
/* A job's details record: `struct job_details` in 22.05, the typedef `job_details_t` of an
 * unnamed struct in 24.11. */
typedef __typeof__(*((job_record_t *) 0)->details) energy_job_details_t;
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(23, 2, 0)
#include "src/interfaces/accounting_storage.h"
#else
#include "src/common/slurm_accounting_storage.h"
#endif
/* srun_allocate(): srun_comm.h until 23.11, proc_req.h from 24.05 on. */
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(24, 5, 0)
#include "src/slurmctld/proc_req.h"
#else
#include "src/slurmctld/srun_comm.h"
#endif

/* bit_test(): a function until 23.11; from 24.11 on a macro for the inline test, and the
 * exported function is slurm_bit_test(). */
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(24, 11, 0)
#define ENERGY_BIT_TEST(X) X(slurm_bit_test)
#else
#define ENERGY_BIT_TEST(X) X(bit_test)
#endif

/* Functions we call, by their exported names (not the macros that wrap some of them). */
#define ENERGY_SLURM_FUNCTIONS(X)            \
	X(log_var)                           \
	X(get_log_level)                     \
	X(slurm_xfree)                       \
	X(slurm_xrecalloc)                   \
	X(xstrdup)                          \
	X(slurm_strerror)                    \
	X(list_iterator_create)              \
	X(list_next)                         \
	X(list_iterator_destroy)             \
	X(list_destroy)                      \
	X(bit_alloc)                         \
	X(bit_copy)                          \
	ENERGY_BIT_TEST(X)                   \
	X(bit_set)                           \
	X(bit_not)                           \
	X(bit_or)                            \
	X(bit_size)                          \
	X(bit_set_count)                     \
	X(slurm_bit_free)                    \
	X(lock_slurmctld)                    \
	X(unlock_slurmctld)                  \
	X(find_job_record)                   \
	X(build_job_queue)                   \
	X(sort_job_queue)                    \
	X(select_nodes)                      \
	X(launch_job)                        \
	X(srun_allocate)                     \
	X(acct_policy_job_runnable_pre_select) \
	X(fed_mgr_job_lock)                  \
	X(fed_mgr_job_unlock)                \
	X(fed_mgr_job_start)                 \
	X(bit_and)                           \
	X(bit_and_not)                       \
	X(bit_super_set)                     \
	X(job_test_resv)                     \
	X(job_req_node_filter)               \
	X(license_job_test)                  \
	X(job_independent)                   \
	X(job_array_start_test)              \
	X(job_queue_rec_magnetic_resv)       \
	X(job_resv_clear_magnetic_flag)      \
	X(acct_policy_get_prio_thresh)       \
	X(find_part_record)                  \
	X(find_resv_name)                    \
	X(acct_policy_alter_job)             \
	X(acct_policy_job_runnable_post_select) \
	X(assoc_mgr_lock)                    \
	X(assoc_mgr_unlock)                  \
	X(get_node_cnts)                     \
	X(select_g_job_test)                 \
	X(schedule_job_save)                 \
	X(schedule_node_save)                \
	X(deadline_ok)                       \
	X(part_policy_valid_acct)            \
	X(part_policy_valid_qos)             \
	X(job_fail_qos)                      \
	X(bb_g_job_try_stage_in)             \
	ENERGY_SLURM_FUNCTIONS_RELEASE(X)

/*
 * What changed between the releases:
 * - 22.05: a job held by a QOS/association limit is told by acct_policy_job_runnable_state();
 *   24.11: by job_state_reason_check(reason, JSR_QOS_ASSOC) (the former is gone).
 * - 22.05: accounting is updated for a changed running job with
 *   jobacct_storage_job_start_direct(); 24.11 folded its check into jobacct_storage_g_job_start().
 * - 24.11: part_policy_valid_qos() takes the submitting user's uid.
 * - 24.11: job_test_resv() and select_g_job_test() take a resv_exc_t, whose parts
 *   reservation_delete_resv_exc_parts() frees (22.05: a core bitmap).
 */
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(24, 11, 0)
#define ENERGY_SLURM_FUNCTIONS_RELEASE(X)    \
	X(job_state_reason_check)            \
	X(jobacct_storage_g_job_start)       \
	X(reservation_delete_resv_exc_parts)
#else
/* select_g_select_jobinfo_get(): gone in 25.11; only 22.05 needs it (SELECT_JOBDATA_CLEANING). */
#define ENERGY_SLURM_FUNCTIONS_RELEASE(X)    \
	X(acct_policy_job_runnable_state)    \
	X(jobacct_storage_job_start_direct)  \
	X(select_g_select_jobinfo_get)
#endif

/*
 * What the node-side plugins (gpu/nvml, acct_gather_energy/nvml) call: only functions of
 * libslurmfull, which slurmd, slurmstepd and slurmctld all load. Resolved as a table of its own,
 * so that a process without slurmctld's symbols can still use them.
 */
#define ENERGY_NODE_FUNCTIONS(X)             \
	X(log_var)                           \
	X(get_log_level)                     \
	X(slurm_xfree)                       \
	X(xstrdup)                           \
	X(list_create)                       \
	X(destroy_gres_slurmd_conf)          \
	X(add_gres_to_list)                  \
	X(gres_get_step_info)                \
	X(list_iterator_create)              \
	X(list_next)                         \
	X(list_iterator_destroy)             \
	X(bit_alloc)                         \
	X(bit_set)                           \
	ENERGY_BIT_TEST(X)                   \
	X(bit_size)                          \
	X(bit_set_count)                     \
	X(slurm_bit_free)                    \
	ENERGY_RUNNING_IN(X)                 \
	X(list_destroy)                      \
	X(slurm_conf)                        \
	ENERGY_NODE_FUNCTIONS_RELEASE(X)

/* Which daemon we run in: the functions running_in_slurmctld()/_slurmd()/_slurmstepd() until
 * 24.11; from 25.11 on those are macros over run_in_daemon(IS_* flags). energy_node_daemon()
 * answers in every release. */
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(25, 11, 0)
#define ENERGY_RUNNING_IN(X) X(run_in_daemon)
#else
#define ENERGY_RUNNING_IN(X)                 \
	X(running_in_slurmctld)              \
	X(running_in_slurmd)                 \
	X(running_in_slurmstepd)
#endif

/* 24.11: gpu_get_tres_pos() tells where gres/gpumem and gres/gpuutil sit in a step's TRES usage
 * record, for gpu_p_usage_read(). */
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(24, 11, 0)
#define ENERGY_NODE_FUNCTIONS_RELEASE(X) X(gpu_get_tres_pos)
#else
#define ENERGY_NODE_FUNCTIONS_RELEASE(X)
#endif

typedef struct energy_node_api {
#define ENERGY_NODE_MEMBER(name) __typeof__(name) *name;
	ENERGY_NODE_FUNCTIONS(ENERGY_NODE_MEMBER)
#undef ENERGY_NODE_MEMBER
} energy_node_api_t;

/* Like energy_slurm_api_resolve(), for the node-side table. Also enables energy_log(). */
extern const char *energy_node_api_resolve(energy_node_api_t *api);

/* The daemon that loaded us, through the resolved table. */
typedef enum energy_daemon {
	ENERGY_DAEMON_OTHER = 0,
	ENERGY_DAEMON_SLURMSTEPD = 1,
	ENERGY_DAEMON_SLURMD = 2,
	ENERGY_DAEMON_SLURMCTLD = 3,
} energy_daemon_t;
extern energy_daemon_t energy_node_daemon(const energy_node_api_t *api);

/* True once either table is resolved (energy_log() then writes to the daemon's log). */
extern bool energy_log_ready(void);

/* Macro values the node-side plugins need. */
extern uint32_t energy_gres_conf_env_nvml(void);
extern int energy_gres_step_data_bitmap(void);

/*
 * The bitmap of GRES `name` allocated to the job on node `node_inx` of a job's GRES list
 * (gres_job_state_t's gres_bit_alloc, as 22.05's gres_get_job_info() returned it; 24.11 has no
 * such call). Borrowed from the list's data; NULL when the job has none. `api` resolved.
 */
/*
 * Appends an autodetected GPU to a gres_slurmd_conf_t list as the stock gpu/nvml does (name
 * "gpu", count 1, CUDA_VISIBLE_DEVICES set by NVML index; from 24.11 also marked as
 * autodetected): 22.05's add_gres_to_list() takes the fields as arguments, 24.11's a record.
 * The strings and the bitmap are copied. `api` resolved.
 */
extern void energy_gres_add_gpu(const energy_node_api_t *api, energy_list_t list, uint32_t cpu_cnt,
				char *cpus, bitstr_t *cpus_bitmap, char *file, char *type_name,
				char *links, char *unique_id);

extern bitstr_t *energy_job_gres_bitmap(const energy_node_api_t *api, energy_list_t job_gres_list,
					const char *name, uint32_t node_inx);

/*
 * One device file of this node's GRES as Slurm numbers them (gres_device_t): `index` is the bit
 * of the gres bitmaps (SLURM_JOB_GPUS, a step's usable GPUs), `path` the device file, `minor` its
 * minor number as Slurm stat()ed it (valid when `is_char`), `dev_num` the number at the end of
 * the file name (-1 if none). `path` is truncated (NUL-terminated) when longer than the buffer.
 */
typedef struct energy_gres_device {
	int index;
	int dev_num;
	uint32_t minor;
	bool is_char;
	char path[256];
} energy_gres_device_t;

/*
 * Slurm's own list of this node's GRES device files (gres_g_get_devices() without a job: every
 * plugin's devices, one record per file), copied into `out` (at most `cap` records). Returns
 * the number of records Slurm has (more than `cap`: the rest were left out), -1 if Slurm has
 * no list or it cannot be asked for. `in_gpu_plugin`: the caller may be inside a GPU plugin
 * callback, where 24.11 already holds gres_context_lock, which its gres_g_get_devices() takes:
 * there this returns -1 on 24.11 (22.05's takes no lock once the GRES plugins are initialised,
 * so it answers). It clears the `alloc` flags of Slurm's records, which only a caller in the
 * middle of its own gres_g_get_devices() reads: call it from the daemon's main thread, never
 * concurrently with task/cgroup.
 */
extern int energy_gres_devices(const energy_node_api_t *api, energy_gres_device_t *out, int cap,
			       bool in_gpu_plugin);

/*
 * slurmstepd's step record (stepd_step_rec_t, src/slurmd/slurmstepd/slurmstepd_job.h), as
 * acct_gather_energy's ENERGY_DATA_STEP_PTR hands it over: only the fields we read. Compiled
 * in stepd.c against slurmstepd's own header; `step` must be that record.
 */
extern void *energy_stepd_step_gres_list(const void *step);
extern void *energy_stepd_job_gres_list(const void *step);
extern void energy_stepd_ids(const void *step, uint32_t *job_id, uint32_t *step_id);
/* This node's name in slurmd and slurmstepd (their `conf->node_name`); NULL elsewhere. Call
 * only in those two daemons: `conf` is looked up by name. */
extern const char *energy_slurmd_node_name(void);

/* Data objects we read or write, by address. */
#define ENERGY_SLURM_DATA(X)                 \
	X(slurm_conf)                        \
	X(node_record_table_ptr)             \
	X(node_record_count)                 \
	X(avail_node_bitmap)                 \
	X(up_node_bitmap)                    \
	X(part_list)                         \
	X(job_list)                          \
	X(last_job_update)                   \
	X(last_node_update)                  \
	X(last_part_update)                  \
	X(last_resv_update)                  \
	X(resv_list)                         \
	X(slurmctld_config)                  \
	X(slurmctld_diag_stats)              \
	X(acct_db_conn)                      \
	X(accounting_enforce)                \
	X(g_qos_count)                       \
	X(g_tres_count)

/*
 * Every Slurm entry point the bundle uses, with the exact type of the running tree's prototype.
 * Filled by energy_slurm_api_resolve(); a NULL member never survives a successful resolve.
 */
typedef struct energy_slurm_api {
#define ENERGY_FN_MEMBER(name) __typeof__(name) *name;
#define ENERGY_DATA_MEMBER(name) __typeof__(name) *name;
	ENERGY_SLURM_FUNCTIONS(ENERGY_FN_MEMBER)
	ENERGY_SLURM_DATA(ENERGY_DATA_MEMBER)
#undef ENERGY_FN_MEMBER
#undef ENERGY_DATA_MEMBER
} energy_slurm_api_t;

/*
 * Resolve every member with dlsym(RTLD_DEFAULT, ...). Returns NULL on success, otherwise the
 * name of the first symbol this process does not define (the table is then unusable). Keeps a
 * private copy for the shim's own helpers below.
 */
extern const char *energy_slurm_api_resolve(energy_slurm_api_t *api);

/* Slurm's info()/debug()/... macros: log `msg` verbatim at `level` when the daemon logs it. */
extern void energy_log(int level, const char *msg);
/* The level the daemon logs at (get_log_level()), LOG_LEVEL_INFO before a resolve. */
extern int energy_log_level(void);

/* Job state macros of slurm_protocol_defs.h. */
extern bool energy_job_is_pending(const job_record_t *job);
extern bool energy_job_is_running(const job_record_t *job);
extern bool energy_job_is_suspended(const job_record_t *job);
extern bool energy_job_is_completing(const job_record_t *job);
extern bool energy_job_is_configuring(const job_record_t *job);
/* The job asks for a node layout only Slurm's selection can make: --spread-job, --contiguous,
 * --switches, a node range (-N min-max) that it fills as far as it can,
 * --gres-flags=enforce-binding, --ntasks-per-gpu, or feature counts / matching OR. */
extern bool energy_job_layout_by_slurm(const job_record_t *job);
/* Whether sched/backfill would give this waiting job a reservation: not with a QOS flagged
 * NoReserve, not below its QOS's MinPrioThreshold (else `bf_min_prio_reserve`), not pending
 * for less than `bf_min_age_reserve` seconds since it became eligible. Job read lock held;
 * takes the association manager's QOS read lock itself. */
extern bool energy_job_reserves(job_record_t *job, uint32_t min_prio_reserve, uint32_t min_age_reserve_s,
				time_t now);
/* Marks (or unmarks) the node at table index `i` as PLANNED (sinfo's `planned`: reserved for a
 * waiting job), as sched/backfill does: never an allocated node. Returns whether its state
 * changed. Node write lock held. */
extern bool energy_node_set_planned(int i, bool planned);
/* --deadline, as slurmctld's schedulers apply it right before select_nodes(): the job's time
 * limit becomes at most the time left until its deadline (when it has no limit, its
 * partition's default or maximum, as the main scheduler takes them). Returns the limit to put
 * back if the start fails, or NO_VAL when nothing changed. */
extern uint32_t energy_job_limit_to_deadline(job_record_t *job, time_t now);
/* Which features the next select_nodes() uses: the job's --prefer features when `prefer` and it
 * has them (returns true), else its required ones (returns false); Slurm's schedulers set these
 * before each test, the preferred ones first. */
extern bool energy_job_features_use(job_record_t *job, bool prefer);
/* Starts burst-buffer stage-in for pending jobs expected to start within ten hours (their
 * StartTime, which the cycle has just set), as sched/backfill does after each cycle. Needs the
 * job read lock at least. A no-op without BurstBufferType. */
extern void energy_bb_try_stage_in(void);
extern bool energy_job_is_finished(const job_record_t *job);

/* Node state macros: the node can take no new work (down, drained or draining, fail, future,
 * not responding, maintenance, rebooting). */
extern bool energy_node_is_unusable(const node_record_t *node);
extern bool energy_node_is_powered_down(const node_record_t *node);
extern bool energy_node_is_powering_up(const node_record_t *node);

/* Values of macros bindgen cannot evaluate or that change between releases. */
extern uint64_t energy_mem_per_cpu_flag(void);
extern uint32_t energy_job_flag_backfill(void);
extern uint64_t energy_debug_flag_backfill(void);
extern uint16_t energy_cr_memory_flag(void);
extern uint16_t energy_cr_core_flag(void);

/*
 * Where a pending job may run, the way sched/backfill decides it before testing a queue
 * record. Needs slurmctld's job write, node read and partition read locks (the scheduler's set).
 */

/* Why a job cannot be started at all this cycle (NULL: it can). Per job: still pending, not
 * held, not revoked or cleaning, dependencies met and --begin reached (job_independent),
 * array throttle (max_run_tasks). */
extern const char *energy_job_not_runnable(job_record_t *job);

enum energy_route_status {
	ENERGY_ROUTE_NOW = 0,   /* may start now on `nodes` */
	ENERGY_ROUTE_LATER = 1, /* may start from `not_before` on `nodes` */
	ENERGY_ROUTE_NEVER = 2, /* not through this record this cycle: `why` */
};

typedef struct energy_route {
	int status;
	const char *why;        /* static text */
	bitstr_t *nodes;        /* owned by the caller (free with slurm_bit_free) */
	time_t not_before;
	const char *part_name;  /* borrowed from the partition record */
	const char *resv_name;  /* borrowed from the reservation record, NULL without one */
	bool magnetic;          /* the reservation attracts the job without its asking */
	bool filter_inexact;    /* features Slurm's node filter cannot judge (XOR, counts), or
				 * the record's partition gives whole nodes or one user's nodes */
	uint32_t part_time_min; /* the record's partition's DefaultTime, else MaxTime (minutes;
				 * NO_VAL without either): a job without --time gets it there */
} energy_route_t;

/* One queue record (`item` of build_job_queue's list): applies the record's partition and
 * reservation to the job as sched/backfill does, computes the route, and restores the job's
 * partition and reservation. */
extern void energy_route_test(void *item, time_t now, energy_route_t *out);

/* What a route changed on a job, to undo when the start fails. */
typedef struct energy_route_saved {
	part_record_t *part_ptr;
	void *resv_ptr;
	uint32_t resv_id;
	bool magnetic_applied;
} energy_route_saved_t;

/* Apply a route found earlier (by names) before select_nodes. Returns NULL, or why it cannot
 * be applied any more (partition gone or no longer the job's, reservation gone). */
extern const char *energy_route_apply(job_record_t *job, const char *part_name,
				      const char *resv_name, bool magnetic,
				      energy_route_saved_t *saved);
/* Undo energy_route_apply (the job was not started). */
extern void energy_route_undo(job_record_t *job, const energy_route_saved_t *saved);

/* Slurm's advanced reservations that hold whole nodes, one at a time: index `i` from 0; false
 * past the end. `nodes` is a copy the caller frees. */
extern bool energy_resv_at(int i, const char **name, bitstr_t **nodes, time_t *start,
			   time_t *end);

/* sdiag's backfill statistics, kept as sched/backfill keeps them: a cycle ends with its
 * duration, jobs tested (depth), jobs that had nodes to try, queue length and jobs started.
 * Call with the job write lock held. */
extern void energy_diag_cycle_end(uint64_t cycle_usec, uint32_t depth, uint32_t depth_try,
				  uint32_t queue_len, uint32_t started, time_t now);

/*
 * Raise a running job's time limit to `limit_min` the way `scontrol update TimeLimit=` does for
 * an operator: never lower, never above the partition's MaxTime, the QOS's or association's
 * MaxWall (per job), never for a job whose limit an admin set; accounting policy told
 * (acct_policy_alter_job, GrpTRESRunMins), end time moved, slurmdbd's record updated.
 * Returns true when the limit changed (`*old_min`, `*new_min` set). Job write, partition read
 * locks held.
 */
/*
 * How far the slowdown extension may raise the job's time limit (minutes): its partition's
 * MaxTime, the MaxWall (per job) of its QOS, its partition's QOS and its association, and the
 * time from its start (or from `now` while it waits) to its deadline; its own limit when an
 * admin set it. INFINITE when nothing caps it. Job and partition read locks held; takes the
 * association manager's read locks itself.
 */
extern uint32_t energy_job_limit_cap(const job_record_t *job, time_t now);
extern bool energy_extend_time_limit(job_record_t *job, uint32_t limit_min, uint32_t *old_min,
				     uint32_t *new_min);

/* A pending job the scheduler holds nodes for waits for resources: its reason becomes
 * `Resources` (as sched/backfill sets it), unless it waits for something else (dependency,
 * limits, held...) or its reason is written out in words (state_desc). */
extern void energy_job_wait_resources(job_record_t *job);
/* A pending job behind a higher-priority job that waits in the same partition (or
 * reservation): its reason becomes `Priority`, as slurmctld's main scheduler sets it, unless
 * it waits for something else or its reason is written out in words. */
extern void energy_job_wait_priority(job_record_t *job);

/*
 * Sets `name=value` in the job's SPANK environment (what slurmctld sends with the job's prolog
 * and batch launch), replacing every entry of that name, also one already prefixed with
 * `SPANK_` as slurmd writes them; with value NULL only removes them. Needs the job write lock.
 * Returns how many entries were removed.
 */
/*
 * Slurm's will-run test for a pending job, as sched/backfill makes it: node counts from
 * get_node_cnts for the job's (applied) partition, then select_g_job_test in
 * SELECT_MODE_WILL_RUN over `candidates` (first without sharing, then as requested). On
 * success `*start` is when and `*nodes` (a new bitmap, the caller frees it) where the job
 * would run. Needs the job write and node read locks. Returns Slurm's error code.
 */
extern int energy_will_run(job_record_t *job, bitstr_t *candidates, time_t *start,
			   bitstr_t **nodes);

/* Whether select_nodes' error `rc` is about the nodes it was given (busy, not usable, too
 * small), not about the job (a QOS/association limit reached after selection). */
extern bool energy_refusal_is_about_nodes(int rc);

/* Whether no QOS or association limit holds the job back, the main scheduler's test before
 * select_nodes (a job held at a limit is re-checked against it). Job write lock held. */
extern bool energy_job_acct_policy_runnable(job_record_t *job);

extern int energy_job_set_spank_env(job_record_t *job, const char *name, const char *value);

/* slurmctld_config fields the scheduler watches. */
extern int energy_server_thread_count(void);
/* Asks slurmctld's state-save thread to write job and node state soon, as the main scheduler
 * does after starting jobs (its own locking; call without or with slurmctld's locks). */
extern void energy_schedule_state_save(void);
/* Write the job state file now (slurmctld's dump_all_job_state(), which takes the job read lock
 * itself: call it holding no slurmctld lock). Returns its error code (0 when written). */
extern int energy_save_job_state(void);
/* For a batch job whose launch waits for the state file: what launch_job() records before it
 * sends the RPC (the batch host and the batch step record), so that the file holds them: a
 * slurmctld that recovers the job from it then completes it when its script ends (the completion
 * RPC needs the batch step) or finds it missing from its batch host. Needs the job write lock.
 * Returns 0, or -1 when the job cannot have them (launch it at once then). */
extern int energy_prepare_batch_launch(job_record_t *job);
/* Right before launch_job(): drop the batch step energy_prepare_batch_launch() made, as
 * launch_job() makes its own. Needs the job write lock. */
extern void energy_drop_batch_step(job_record_t *job);
/* Whether a node registration reported the job's batch step since its time_last_active was
 * zeroed (validate_jobs_on_node() sets it for every step a node reports): -1 when the job has
 * no batch step record, else 0 or 1. Under the job read lock. */
extern int energy_batch_step_reported(const job_record_t *job);
/* Zeroes the batch step's time_last_active (read only for steps other than batch and extern,
 * by _notify_srun_missing_step()). Under the job write lock. */
extern void energy_batch_step_forget_report(job_record_t *job);
/* Whether the first node of a job's allocation, whose registration reports a batch job to
 * slurmctld (and refreshes its time_last_active), has registered with this slurmctld: its
 * registration, jobs included, has been processed (validate_jobs_on_node() runs before
 * validate_node_specs() sets the node's version, under the same job write lock). */
extern bool energy_job_first_node_registered(const job_record_t *job);
/* Asks the job's first node to register again (REQUEST_NODE_REGISTRATION_STATUS through
 * slurmctld's agent, as ping_nodes() does); its registration reports the jobs it runs and runs
 * slurmctld's own missing-job check. Needs the job and node locks. 0 when queued. */
extern int energy_request_first_node_registration(const job_record_t *job);
/* Whether any node has registered with this slurmctld. Needs the job or node lock. */
extern bool energy_any_node_registered(void);
/* What slurmctld does with a batch job missing from its batch node (_purge_missing_jobs(): exit
 * code 1, job_complete() as a node failure, requeued when the job allows it and may_requeue); a running job no
 * node is left on (their epilogs completed) is then released as at its time limit
 * (deallocate_nodes(), which job_complete() skips for it). Needs the job write lock. Returns
 * job_complete()'s code. */
extern int energy_job_complete_missing(job_record_t *job, bool may_requeue);
/* A running job none of whose nodes is left on it (node_cnt 0 or an empty node bitmap: every
 * node's epilog completion was taken, make_node_idle()). Under the job read lock. */
extern bool energy_job_no_node_left(const job_record_t *job);
/* Whether a job is marked as waiting for its prolog (PrologFlags=Alloc: state_reason WAIT_PROLOG
 * with nodes left in node_bitmap_pr). Needs the job lock. */
extern bool energy_job_waits_for_prolog(const job_record_t *job);
/* Whether every node the job waits for a prolog completion from has registered with this
 * slurmctld. Needs the job and node locks. */
extern bool energy_job_prolog_nodes_registered(const job_record_t *job);
/* What slurmctld does when REQUEST_COMPLETE_PROLOG arrives (prolog_complete(), return code 0),
 * for every node the job still waits for. Needs the job write lock. Returns its code. */
extern int energy_job_finish_lost_prolog(job_record_t *job);
extern bool energy_shutting_down(void);

#endif /* SLURM_ENERGY_SHIM_H */
