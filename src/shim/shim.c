/*
 * slurm-energy: the C side of the root package's Slurm bindings (see shim.h).
 *
 * Must never reference a Slurm symbol directly: everything goes through the table resolved
 * with dlsym, so the shared object loads in any process (and links into test binaries).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "shim.h"

#include "src/slurmctld/agent.h"
#include "src/slurmctld/ping_nodes.h"
#include "src/slurmctld/node_scheduler.h"

/* The shim's own copy, for energy_log(); written once by a successful resolve. */
static energy_slurm_api_t resolved;
static volatile int resolved_ok;

/* The logging pair, from whichever table was resolved first. */
static __typeof__(log_var) *log_fn;
static __typeof__(get_log_level) *level_fn;
static volatile int log_ok;

static void set_log_fns(__typeof__(log_var) *l, __typeof__(get_log_level) *g)
{
	if (log_ok)
		return;
	log_fn = l;
	level_fn = g;
	__sync_synchronize();
	log_ok = 1;
}

bool energy_log_ready(void)
{
	return log_ok;
}

const char *energy_node_api_resolve(energy_node_api_t *api)
{
	energy_node_api_t t;

	memset(&t, 0, sizeof(t));
#define ENERGY_NODE_RESOLVE(name)                                          \
	t.name = (__typeof__(t.name)) dlsym(RTLD_DEFAULT, #name);          \
	if (!t.name)                                                       \
		return #name;
	ENERGY_NODE_FUNCTIONS(ENERGY_NODE_RESOLVE)
#undef ENERGY_NODE_RESOLVE
	*api = t;
	set_log_fns(t.log_var, t.get_log_level);
	return NULL;
}

energy_daemon_t energy_node_daemon(const energy_node_api_t *api)
{
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(25, 11, 0)
	if (api->run_in_daemon(IS_SLURMSTEPD))
		return ENERGY_DAEMON_SLURMSTEPD;
	if (api->run_in_daemon(IS_SLURMD))
		return ENERGY_DAEMON_SLURMD;
	if (api->run_in_daemon(IS_SLURMCTLD))
		return ENERGY_DAEMON_SLURMCTLD;
#else
	if (api->running_in_slurmstepd())
		return ENERGY_DAEMON_SLURMSTEPD;
	if (api->running_in_slurmd())
		return ENERGY_DAEMON_SLURMD;
	if (api->running_in_slurmctld())
		return ENERGY_DAEMON_SLURMCTLD;
#endif
	return ENERGY_DAEMON_OTHER;
}

uint32_t energy_gres_conf_env_nvml(void)
{
	return GRES_CONF_ENV_NVML;
}

int energy_gres_devices(const energy_node_api_t *api, energy_gres_device_t *out, int cap,
			bool in_gpu_plugin)
{
	energy_list_t devices;
	energy_list_itr_t it;
	gres_device_t *dev;
	int n = 0;

#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(24, 11, 0)
	/* 24.11's gres_g_get_devices() takes gres_context_lock (src/interfaces/gres.c), which Slurm
	 * already holds when it calls the GPU plugin (gpu_p_step_hardware_init from gres_gpu.c,
	 * gpu_p_get_system_gpu_list during the node configuration load): asking from there would
	 * deadlock slurmd or slurmstepd. The GPU plugin says so and gets -1; it derives Slurm's
	 * order from its own autodetected records instead (gpu-control's devmap). Our other callers
	 * (acct_gather_energy at ENERGY_DATA_STEP_PTR, slurmstepd.c; the SPANK plugin's
	 * slurm_spank_init_post_opt, from job_manager() in mgr.c) run on slurmstepd's main thread
	 * outside any GRES function, where the lock is free. The last parameter is slurmstepd's
	 * step record, used only with a job's gres list: NULL here. */
	__typeof__(gres_g_get_devices) *get_devices;

	if (in_gpu_plugin)
		return -1;
	get_devices = (__typeof__(gres_g_get_devices) *) dlsym(RTLD_DEFAULT, "gres_g_get_devices");
	if (!api || !get_devices)
		return -1;
	devices = get_devices(NULL, true, 0, NULL, 0, NULL);
#else
	/* Looked up here rather than in energy_node_api_t: its last parameter is slurmstepd's step
	 * record in 24.11, a type the Rust bindings need not describe (NULL/0 in every release).
	 * 22.05's takes no lock once the GRES plugins are initialised, so the GPU plugin may call
	 * it from its callbacks too. */
	__typeof__(gres_g_get_devices) *get_devices =
		(__typeof__(gres_g_get_devices) *) dlsym(RTLD_DEFAULT, "gres_g_get_devices");

	(void) in_gpu_plugin;
	if (!api || !get_devices)
		return -1;
	devices = get_devices(NULL, true, 0, NULL, 0, 0);
#endif
	if (!devices)
		return -1;
	it = api->list_iterator_create(devices);
	while ((dev = api->list_next(it))) {
		if (out && n < cap) {
			energy_gres_device_t *o = &out[n];

			memset(o, 0, sizeof(*o));
			o->index = dev->index;
			o->dev_num = dev->dev_num;
			o->minor = dev->dev_desc.minor;
			o->is_char = (dev->dev_desc.type == DEV_TYPE_CHAR);
			if (dev->path)
				snprintf(o->path, sizeof(o->path), "%s", dev->path);
		}
		n++;
	}
	api->list_iterator_destroy(it);
	/* The list holds the plugins' records without owning them (list_create(NULL)). */
	api->list_destroy(devices);
	return n;
}

int energy_gres_step_data_bitmap(void)
{
	return GRES_STEP_DATA_BITMAP;
}

void energy_gres_add_gpu(const energy_node_api_t *api, energy_list_t list, uint32_t cpu_cnt,
			 char *cpus, bitstr_t *cpus_bitmap, char *file, char *type_name, char *links,
			 char *unique_id)
{
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(24, 11, 0)
	gres_slurmd_conf_t rec;

	memset(&rec, 0, sizeof(rec));
	rec.config_flags = GRES_CONF_ENV_NVML | GRES_CONF_AUTODETECT;
	rec.count = 1;
	rec.cpu_cnt = cpu_cnt;
	rec.cpus = cpus;
	rec.cpus_bitmap = cpus_bitmap;
	rec.file = file;
	rec.links = links;
	rec.name = "gpu";
	rec.type_name = type_name;
	rec.unique_id = unique_id;
	api->add_gres_to_list(list, &rec);
#else
	api->add_gres_to_list(list, "gpu", 1, cpu_cnt, cpus, cpus_bitmap, file, type_name, links,
			      unique_id, GRES_CONF_ENV_NVML);
#endif
}

bitstr_t *energy_job_gres_bitmap(const energy_node_api_t *api, energy_list_t job_gres_list,
				 const char *name, uint32_t node_inx)
{
	energy_list_itr_t it;
	gres_state_t *gres;
	bitstr_t *found = NULL;

	if (!api || !job_gres_list || !name)
		return NULL;
	it = api->list_iterator_create(job_gres_list);
	while ((gres = api->list_next(it))) {
		gres_job_state_t *js = gres->gres_data;

		if (!gres->gres_name || strcmp(gres->gres_name, name) || !js)
			continue;
		if (js->gres_bit_alloc && node_inx < js->node_cnt && js->gres_bit_alloc[node_inx]) {
			found = js->gres_bit_alloc[node_inx];
			break;
		}
	}
	api->list_iterator_destroy(it);
	return found;
}

/*
 * slurmctld functions only the shim's own helpers call (saving starts before their launch,
 * see src/launch.rs). Kept out of energy_slurm_api_t so that the Rust bindings need not
 * describe the step records they take.
 */
#define ENERGY_SHIM_FUNCTIONS(X)             \
	X(dump_all_job_state)                \
	X(pick_batch_host)                   \
	X(build_batch_step)                  \
	X(find_step_record)                  \
	X(delete_step_record)                \
	X(job_complete)                      \
	X(prolog_complete)                   \
	X(bit_ffs)                           \
	X(slurm_xcalloc)                     \
	X(hostlist_create)                   \
	X(set_agent_arg_r_uid)               \
	X(agent_queue_request)               \
	X(ping_begin)                        \
	X(deallocate_nodes)

static struct {
#define ENERGY_SHIM_MEMBER(name) __typeof__(name) *name;
	ENERGY_SHIM_FUNCTIONS(ENERGY_SHIM_MEMBER)
#undef ENERGY_SHIM_MEMBER
} shim_fns;

const char *energy_slurm_api_resolve(energy_slurm_api_t *api)
{
	energy_slurm_api_t t;

	memset(&t, 0, sizeof(t));
#define ENERGY_RESOLVE(name)                                               \
	t.name = (__typeof__(t.name)) dlsym(RTLD_DEFAULT, #name);          \
	if (!t.name)                                                       \
		return #name;
	ENERGY_SLURM_FUNCTIONS(ENERGY_RESOLVE)
	ENERGY_SLURM_DATA(ENERGY_RESOLVE)
#undef ENERGY_RESOLVE
#define ENERGY_RESOLVE_SHIM(name)                                          \
	shim_fns.name = (__typeof__(shim_fns.name)) dlsym(RTLD_DEFAULT, #name); \
	if (!shim_fns.name)                                                \
		return #name;
	ENERGY_SHIM_FUNCTIONS(ENERGY_RESOLVE_SHIM)
#undef ENERGY_RESOLVE_SHIM
	*api = t;
	resolved = t;
	__sync_synchronize();
	resolved_ok = 1;
	set_log_fns(t.log_var, t.get_log_level);
	return NULL;
}

int energy_log_level(void)
{
	if (!log_ok)
		return LOG_LEVEL_INFO;
	return level_fn();
}

void energy_log(int level, const char *msg)
{
	if (!log_ok || !msg)
		return;
	/* The check format_print() makes before calling log_var(). */
	if (level_fn() >= level)
		log_fn((log_level_t) level, "%s", msg);
}

bool energy_job_is_pending(const job_record_t *job)
{
	return IS_JOB_PENDING(job);
}

bool energy_job_is_running(const job_record_t *job)
{
	return IS_JOB_RUNNING(job);
}

bool energy_job_is_suspended(const job_record_t *job)
{
	return IS_JOB_SUSPENDED(job);
}

bool energy_job_is_completing(const job_record_t *job)
{
	return IS_JOB_COMPLETING(job);
}

bool energy_job_is_finished(const job_record_t *job)
{
	return IS_JOB_FINISHED(job);
}

bool energy_job_is_configuring(const job_record_t *job)
{
	return IS_JOB_CONFIGURING(job);
}

/* MCSParameters's select mode, read as slurm_mcs.c reads it: `select` puts every labelled job
 * on nodes of its label only (`ondemandselect`, the default, only for --exclusive=mcs jobs,
 * which are whole-node jobs and placed by Slurm already). */
static bool mcs_select_enforced(void)
{
	const char *plugin = resolved.slurm_conf->mcs_plugin;
	const char *params = resolved.slurm_conf->mcs_plugin_params;

	if (!plugin || !*plugin || strcasestr(plugin, "none") || !params)
		return false;
	if (strcasestr(params, "noselect") || strcasestr(params, "ondemandselect"))
		return false;
	return strcasestr(params, "select") != NULL;
}

/* A topology plugin that shapes multi-node layouts (tree, block, torus), not none/default/flat. */
static bool topology_shapes_layout(void)
{
	const char *plugin = resolved.slurm_conf->topology_plugin;

	return plugin && *plugin && !strcasestr(plugin, "none") && !strcasestr(plugin, "default") &&
	       !strcasestr(plugin, "flat");
}

/* A reservation of cores, not of whole nodes (CoreCnt=, or Flags=... on part of a node's
 * cores) that has not ended: the other cores of its nodes stay usable, by cons_tres's count. */
static bool core_reservation_exists(time_t now)
{
	energy_list_itr_t it;
	slurmctld_resv_t *resv;
	bool found = false;

	if (!*resolved.resv_list)
		return false;
	it = resolved.list_iterator_create(*resolved.resv_list);
	while ((resv = resolved.list_next(it))) {
		if (resv->node_bitmap && !(resv->ctld_flags & RESV_CTLD_FULL_NODE) &&
		    (resv->end_time > now)) {
			found = true;
			break;
		}
	}
	resolved.list_iterator_destroy(it);
	return found;
}

bool energy_job_layout_by_slurm(const job_record_t *job)
{
	bool node_range;

	if (!resolved_ok)
		return true;
	/* MCS labels with select enforcement (which nodes carry which label is the select plugin's
	 * bookkeeping) and partial-core reservations (cores held back per node): Slurm's count. */
	if (mcs_select_enforced() || core_reservation_exists(time(NULL)))
		return true;
	/* MaxCPUsPerNode of the partition: cons_tres caps the job's CPUs per node by what the
	 * partition's other jobs hold there. */
	if (job->part_ptr && (job->part_ptr->max_cpus_per_node != INFINITE) &&
	    job->part_ptr->max_cpus_per_node)
		return true;
	if (job->bit_flags & SPREAD_JOB)
		return true;
	if (job->req_switch && (job->req_switch != NO_VAL))
		return true;
	/* ExclusiveUser=YES partitions: nodes without other users' jobs, Slurm's rule. */
	if (job->part_ptr && (job->part_ptr->flags & PART_FLAG_EXCLUSIVE_USER))
		return true;
	/* GRES bound to CPUs (--gres-flags=enforce-binding) and tasks per GPU: cons_tres's layout. */
	if (job->bit_flags & GRES_ENFORCE_BIND)
		return true;
	/* The details' type is named differently across releases: reach it through the job. */
	if (!job->details)
		return false;
	if (job->details->ntasks_per_tres && (job->details->ntasks_per_tres != NO_VAL16))
		return true;
	/* Feature counts and matching OR (`a*2&b*2`, `[a|b]`): the node-set logic is the select
	 * plugin's, and 22.05's job_req_node_filter() accepts them without filtering. */
	if (job->details->features && strpbrk(job->details->features, "*["))
		return true;
	/* Whole sockets per job (CR_Socket), and a job's own core layout (--threads-per-core,
	 * --hint=nomultithread, --ntasks-per-core, --sockets/--cores-per-socket): how many CPUs
	 * that makes on each node is cons_tres's count. */
	if (resolved.slurm_conf->select_type_param & ENERGY_CR_SOCKET)
		return true;
	if (job->details->mc_ptr) {
		const multi_core_data_t *mc = job->details->mc_ptr;

		if (((mc->threads_per_core != NO_VAL16) && mc->threads_per_core) ||
		    ((mc->ntasks_per_core != NO_VAL16) && (mc->ntasks_per_core != INFINITE16) &&
		     mc->ntasks_per_core) ||
		    ((mc->sockets_per_node != NO_VAL16) && mc->sockets_per_node) ||
		    ((mc->cores_per_socket != NO_VAL16) && mc->cores_per_socket))
			return true;
	}
	/* Changeable features (a node_features plugin: KNL modes, reboot to activate): which node
	 * to reboot into what is node_features's and select_nodes's choice. */
	if (job->details->features && resolved.slurm_conf->node_features_plugins &&
	    *resolved.slurm_conf->node_features_plugins)
		return true;
	/* --prefer: select_nodes tries the preferred features first, then the required ones. */
	if (job->details->prefer && *job->details->prefer)
		return true;
	/* Several nodes under a topology plugin: the leaf-switch layout is cons_tres's (the
	 * planner does not model switches). */
	if ((job->details->min_nodes > 1) && topology_shapes_layout())
		return true;
	node_range = job->details->max_nodes && (job->details->max_nodes != NO_VAL) &&
		     (job->details->max_nodes != INFINITE) &&
		     (job->details->max_nodes > job->details->min_nodes);
	return job->details->contiguous || node_range;
}

bool energy_job_features_use(job_record_t *job, bool prefer)
{
	if (!job || !job->details)
		return false;
	if (prefer && job->details->prefer) {
		job->details->features_use = job->details->prefer;
		job->details->feature_list_use = job->details->prefer_list;
		return true;
	}
	job->details->features_use = job->details->features;
	job->details->feature_list_use = job->details->feature_list;
	return false;
}

bool energy_job_reserves(job_record_t *job, uint32_t min_prio_reserve, uint32_t min_age_reserve_s,
			 time_t now)
{
	assoc_mgr_lock_t locks = { .qos = READ_LOCK };
	bool no_reserve = false;
	uint32_t prio_reserve;

	if (!resolved_ok || !job)
		return true;
	resolved.assoc_mgr_lock(&locks);
	if (job->qos_ptr && (((slurmdb_qos_rec_t *) job->qos_ptr)->flags & QOS_FLAG_NO_RESERVE))
		no_reserve = true;
	prio_reserve = resolved.acct_policy_get_prio_thresh(job, true);
	resolved.assoc_mgr_unlock(&locks);
	if (no_reserve)
		return false;
	if (!prio_reserve)
		prio_reserve = min_prio_reserve;
	if (prio_reserve && (job->priority < prio_reserve))
		return false;
	if (min_age_reserve_s && job->details && job->details->begin_time &&
	    (difftime(now, job->details->begin_time) < (double) min_age_reserve_s))
		return false;
	return true;
}

bool energy_node_set_planned(int i, bool planned)
{
	node_record_t *node;

	if (!resolved_ok || i < 0 || i >= *resolved.node_record_count)
		return false;
	node = (*resolved.node_record_table_ptr)[i];
	if (!node)
		return false;
	if (planned && !IS_NODE_ALLOCATED(node) && !(node->node_state & NODE_STATE_PLANNED)) {
		node->node_state |= NODE_STATE_PLANNED;
		*resolved.last_node_update = time(NULL);
		return true;
	}
	if ((!planned || IS_NODE_ALLOCATED(node)) && (node->node_state & NODE_STATE_PLANNED)) {
		node->node_state &= ~NODE_STATE_PLANNED;
		*resolved.last_node_update = time(NULL);
		return true;
	}
	return false;
}

bool energy_node_is_unusable(const node_record_t *node)
{
	/* Not registered since this slurmctld started: UNKNOWN, or made IDLE by a ping reply
	 * while its registration (GRES validated, running jobs reconciled: a job whose start a
	 * crash lost is killed there) is still to come. slurmd's version is set only by that
	 * registration and is not in the node state file. Powered-down and booting nodes
	 * register when they are up. MAINT is not here: it marks the nodes of an active
	 * maintenance reservation, whose own jobs (an admin's validation job) may run there as
	 * under stock Slurm; job_test_resv() in the route test keeps every other job off them. */
	bool unregistered = !node->version && !IS_NODE_POWERED_DOWN(node) &&
			    !IS_NODE_POWERING_UP(node);

	return unregistered || IS_NODE_UNKNOWN(node) || IS_NODE_DOWN(node) || IS_NODE_DRAIN(node) || IS_NODE_FAIL(node) ||
	       IS_NODE_FUTURE(node) || IS_NODE_NO_RESPOND(node) ||
	       /* Not REBOOT_REQUESTED: a plain `scontrol reboot` lets the node run jobs until it
		* is idle (`ASAP` also drains it, which counts above). */
	       IS_NODE_REBOOT_ISSUED(node) || IS_NODE_POWERING_DOWN(node) ||
	       /* `scontrol power down` asked (not yet powering down): slurmctld takes it out
		* of avail_node_bitmap, so no scheduler places jobs there. */
	       IS_NODE_POWER_DOWN(node) ||
	       IS_NODE_INVALID_REG(node);
}

bool energy_node_is_powered_down(const node_record_t *node)
{
	return IS_NODE_POWERED_DOWN(node);
}

bool energy_node_is_powering_up(const node_record_t *node)
{
	return IS_NODE_POWERING_UP(node);
}

uint64_t energy_mem_per_cpu_flag(void)
{
	return MEM_PER_CPU;
}

uint32_t energy_job_flag_backfill(void)
{
	return SLURMDB_JOB_FLAG_BACKFILL;
}

uint64_t energy_debug_flag_backfill(void)
{
	return DEBUG_FLAG_BACKFILL;
}

uint16_t energy_cr_memory_flag(void)
{
	return ENERGY_CR_MEMORY;
}

uint16_t energy_cr_core_flag(void)
{
	return ENERGY_CR_CORE;
}

/* ---- Where a pending job may run (see shim.h). Uses the resolved table only. ---- */

#include <pthread.h>

/* The job's QOS was taken from its association after submission (AccountingStorageEnforce
 * with qos): backfill.c's and job_scheduler.c's test before each job. */
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(24, 11, 0)
#define QOS_BIT_TEST(b, i) resolved.slurm_bit_test((b), (i))
#else
#define QOS_BIT_TEST(b, i) resolved.bit_test((b), (i))
#endif
static bool job_qos_revoked(job_record_t *job)
{
	assoc_mgr_lock_t locks = { .assoc = READ_LOCK, .qos = READ_LOCK };
	slurmdb_assoc_rec_t *assoc;
	bool revoked;

	if (!job->qos_id || job->limit_set.qos || !(*resolved.accounting_enforce & ACCOUNTING_ENFORCE_QOS))
		return false;
	resolved.assoc_mgr_lock(&locks);
	assoc = job->assoc_ptr;
	revoked = assoc && ((job->qos_id >= *resolved.g_qos_count) || !assoc->usage ||
			    !assoc->usage->valid_qos ||
			    !QOS_BIT_TEST(assoc->usage->valid_qos, job->qos_id));
	resolved.assoc_mgr_unlock(&locks);
	return revoked;
}

const char *energy_job_not_runnable(job_record_t *job)
{
	uint16_t cleaning = 0;

	if (!resolved_ok || !job || !job->details)
		return "no job details";
	if (IS_JOB_REVOKED(job))
		return "revoked";
	if (!IS_JOB_PENDING(job) || IS_JOB_COMPLETING(job))
		return "no longer pending";
	if (job->priority == 0)
		return "held";
	if (job->array_recs && job->array_recs->max_run_tasks &&
	    (job->array_recs->pend_run_tasks >= job->array_recs->max_run_tasks))
		return "array throttle (max_run_tasks) reached";
	if ((job->array_task_id != NO_VAL || job->array_recs) &&
	    !resolved.job_array_start_test(job))
		return "array throttle reached";
#if SLURM_VERSION_NUMBER < SLURM_VERSION_NUM(24, 11, 0)
	/* 24.11 keeps such a job COMPLETING (tested above) instead of a select plugin flag. */
	resolved.select_g_select_jobinfo_get(job->select_jobinfo, SELECT_JOBDATA_CLEANING,
					     &cleaning);
#endif
	if (cleaning)
		return "cleaning after a previous run";
	if (!resolved.job_independent(job))
		return "dependency or begin time";
	if (job_qos_revoked(job)) {
		/* As both of slurmctld's schedulers: held with reason InvalidQOS until the QOS is
		 * given back to its association (or the job is given another QOS). */
		resolved.job_fail_qos(job, "sched/energy", false);
		*resolved.last_job_update = time(NULL);
		return "QOS no longer allowed to its association (InvalidQOS)";
	}
	if (job->state_reason == FAIL_QOS) {
		void *desc = job->state_desc;

		resolved.slurm_xfree(&desc);
		job->state_desc = NULL;
		job->state_reason = WAIT_NO_REASON;
		*resolved.last_job_update = time(NULL);
	}
	/* A job that can no longer finish by its deadline is ended with FAIL_DEADLINE, as both
	 * of slurmctld's schedulers end it (deadline_ok() logs and records it). */
	if (job->deadline && (job->deadline != NO_VAL) && !resolved.deadline_ok(job, "sched/energy"))
		return "deadline cannot be met: ended (DeadLine)";
	return NULL;
}

uint32_t energy_job_limit_to_deadline(job_record_t *job, time_t now)
{
	uint32_t left_min, limit, saved;

	if (!job || !job->deadline || (job->deadline == NO_VAL) || (job->deadline <= now))
		return NO_VAL;
	left_min = (uint32_t) ((job->deadline - now) / 60);
	limit = left_min;
	if ((job->time_limit != NO_VAL) && (job->time_limit != INFINITE)) {
		limit = MIN(job->time_limit, left_min);
	} else if (job->part_ptr) {
		if ((job->part_ptr->default_time != NO_VAL) && (job->part_ptr->default_time != INFINITE))
			limit = MIN(job->part_ptr->default_time, left_min);
		else if ((job->part_ptr->max_time != NO_VAL) && (job->part_ptr->max_time != INFINITE))
			limit = MIN(job->part_ptr->max_time, left_min);
	}
	if (limit == job->time_limit)
		return NO_VAL;
	saved = job->time_limit;
	job->time_limit = limit;
	return saved;
}

static void route_save(job_record_t *job, energy_route_saved_t *saved)
{
	saved->part_ptr = job->part_ptr;
	saved->resv_ptr = job->resv_ptr;
	saved->resv_id = job->resv_id;
	saved->magnetic_applied = false;
}

void energy_route_undo(job_record_t *job, const energy_route_saved_t *saved)
{
	if (saved->magnetic_applied) {
		void *name = job->resv_name;
		resolved.slurm_xfree(&name);
		job->resv_name = NULL;
		job->bit_flags &= ~JOB_MAGNETIC;
	}
	job->part_ptr = saved->part_ptr;
	job->resv_ptr = saved->resv_ptr;
	job->resv_id = saved->resv_id;
}

/* The record's reservation applied to the job as sched/backfill does before testing it. */
static void route_set_resv(job_record_t *job, part_record_t *part, slurmctld_resv_t *resv,
			   energy_route_saved_t *saved)
{
	if (!resv)
		return;
	if (job->resv_list || job->resv_name) {
		/* One of the reservations the job asked for: keep its name list. */
		job->resv_ptr = resv;
		job->resv_id = resv->resv_id;
	} else {
		job_queue_rec_t rec;

		memset(&rec, 0, sizeof(rec));
		rec.job_ptr = job;
		rec.job_id = job->job_id;
		rec.part_ptr = part;
		rec.resv_ptr = resv;
		resolved.job_queue_rec_magnetic_resv(&rec);
		saved->magnetic_applied = true;
	}
}

#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(24, 11, 0)
#define ENERGY_BIT_TEST_CALL(b, i) resolved.slurm_bit_test((b), (i))
#else
#define ENERGY_BIT_TEST_CALL(b, i) resolved.bit_test((b), (i))
#endif

/* A pending job's reason as slurmctld's schedulers set it: `desc` (may be NULL) replaces the
 * words. */
static void set_reason(job_record_t *job, uint32_t reason, const char *desc, time_t now)
{
	void *old = job->state_desc;

	resolved.slurm_xfree(&old);
	job->state_desc = desc ? resolved.xstrdup(desc) : NULL;
	job->state_reason = reason;
	*resolved.last_job_update = now;
}

/* --nodelist with nodes that are down, drained or not responding (not in slurmctld's
 * avail_node_bitmap): "ReqNodeNotAvail, UnavailableNodes:<nodes>", as select_nodes() says it
 * (stock writes several nodes as a host range, n[2-3]; this, as a list, n2,n3). Once they are
 * back, the reason is cleared for the scheduler's next one. */
static void required_nodes_reason(job_record_t *job, part_record_t *part, time_t now)
{
	bitstr_t *req = job->details->req_node_bitmap;
	bitstr_t *avail_nodes = *resolved.avail_node_bitmap;
	char desc[1024] = "ReqNodeNotAvail, UnavailableNodes:";
	size_t len = strlen(desc), first = len;
	int i, n;

	if (!req || !avail_nodes)
		return;
	if (resolved.bit_super_set(req, avail_nodes)) {
		if (job->state_reason == WAIT_NODE_NOT_AVAIL)
			set_reason(job, WAIT_NO_REASON, NULL, now);
		return;
	}
	n = MIN((int) resolved.bit_size(req), *resolved.node_record_count);
	for (i = 0; i < n; i++) {
		node_record_t *node = (*resolved.node_record_table_ptr)[i];

		if (!node || !ENERGY_BIT_TEST_CALL(req, i) || ENERGY_BIT_TEST_CALL(avail_nodes, i))
			continue;
		if (part->node_bitmap && !ENERGY_BIT_TEST_CALL(part->node_bitmap, i))
			continue;
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(24, 11, 0)
		/* 24.11 names only nodes that are not up (a drained node is up): the others make
		 * "May be reserved for other job". */
		if (*resolved.up_node_bitmap && ENERGY_BIT_TEST_CALL(*resolved.up_node_bitmap, i))
			continue;
#endif
		len += snprintf(desc + len, len < sizeof(desc) ? sizeof(desc) - len : 0, "%s%s",
				(len > first) ? "," : "", node->name);
		if (len >= sizeof(desc))
			break;
	}
	set_reason(job, WAIT_NODE_NOT_AVAIL, (len > first) ? desc : "ReqNodeNotAvail, May be reserved for other job", now);
}

/* The partition's AllowQOS/DenyQOS and AllowAccounts/DenyAccounts, tested as select_nodes()
 * tests them first: with EnforcePartLimits=NO a job may wait in a partition it may not use.
 * On a refusal the job's reason is Slurm's (WAIT_QOS, WAIT_ACCOUNT, with its words). */
static bool part_policy_ok(job_record_t *job, part_record_t *part)
{
	assoc_mgr_lock_t locks = { .assoc = READ_LOCK, .qos = READ_LOCK };
	slurmdb_assoc_rec_t *assoc;
	int rc;

	resolved.assoc_mgr_lock(&locks);
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(24, 11, 0)
	rc = resolved.part_policy_valid_qos(part, job->qos_ptr, job->user_id, job);
#else
	rc = resolved.part_policy_valid_qos(part, job->qos_ptr, job);
#endif
	assoc = job->assoc_ptr;
	if (rc == SLURM_SUCCESS)
		rc = resolved.part_policy_valid_acct(part, assoc ? assoc->acct : NULL, job);
	resolved.assoc_mgr_unlock(&locks);
	return rc == SLURM_SUCCESS;
}

void energy_route_test(void *item, time_t now, energy_route_t *out)
{
	job_queue_rec_t *rec = item;
	job_record_t *job = rec ? rec->job_ptr : NULL;
	part_record_t *part = rec ? rec->part_ptr : NULL;
	energy_route_saved_t saved;
	bitstr_t *avail = NULL;
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(24, 11, 0)
	resv_exc_t exc;

	memset(&exc, 0, sizeof(exc));
#else
	bitstr_t *exc_cores = NULL;
#endif
	bool overlap = false;
	time_t when = now;
	int rc;

	memset(out, 0, sizeof(*out));
	out->status = ENERGY_ROUTE_NEVER;
	if (!resolved_ok || !job || !job->details) {
		out->why = "no job";
		return;
	}
	if (!part || !part->node_bitmap || !(part->state_up & PARTITION_SCHED)) {
		out->why = "partition not schedulable";
		return;
	}
	out->part_name = part->name;
	out->part_time_min = (part->default_time != NO_VAL) ? part->default_time : part->max_time;
	/* This record's partition, not the job's first one: OverSubscribe=EXCLUSIVE and
	 * ExclusiveUser=YES hand the layout to Slurm, as energy_job_layout_by_slurm does for the
	 * job's own partition. */
	if ((part->max_share == 0) || (part->flags & PART_FLAG_EXCLUSIVE_USER))
		out->filter_inexact = true;
	if (rec->resv_ptr) {
		out->resv_name = rec->resv_ptr->name;
		out->magnetic = !(job->resv_list || job->resv_name);
	} else if (job->resv_ptr) {
		out->resv_name = ((slurmctld_resv_t *) job->resv_ptr)->name;
	}

	route_save(job, &saved);
	job->part_ptr = part;
	route_set_resv(job, part, rec->resv_ptr, &saved);

	if (!part_policy_ok(job, part)) {
		out->why = "the partition's AllowQOS/DenyQOS or AllowAccounts/DenyAccounts refuses the job";
		goto done;
	}
	if (!resolved.acct_policy_job_runnable_pre_select(job, false)) {
		out->why = "held by a QOS or association limit";
		goto done;
	}
	/* TRES limits (MaxTRESPerUser, GrpTRES, ...) on what it asked for, as sched/backfill
	 * checks them before reserving: a job held at a limit reserves nothing. Sets the job's
	 * pending reason as Slurm does. */
	if (job->tres_req_cnt &&
	    !resolved.acct_policy_job_runnable_post_select(job, job->tres_req_cnt, false)) {
		out->why = "held by a QOS or association TRES limit";
		goto done;
	}
	if (resolved.license_job_test(job, now, true) != SLURM_SUCCESS) {
		/* Reason `Licenses`, as slurmctld's main scheduler sets it. */
		set_reason(job, WAIT_LICENSES, NULL, now);
		out->why = "licenses not available";
		goto done;
	}
	required_nodes_reason(job, part, now);
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(24, 11, 0)
	rc = resolved.job_test_resv(job, &when, true, &avail, &exc, &overlap, false);
#else
	rc = resolved.job_test_resv(job, &when, true, &avail, &exc_cores, &overlap, false);
#endif
	if (rc != SLURM_SUCCESS) {
		if (when <= now) {
			out->why = "reservation does not allow it";
			goto done;
		}
		/* Its reservation starts later, or a maintenance window covers the partition. A job
		 * that named a reservation waits for it: reason `Reservation`, as select_nodes()
		 * sets it. */
		if (job->resv_name && !out->magnetic)
			set_reason(job, WAIT_RESERVATION, NULL, now);
		out->status = ENERGY_ROUTE_LATER;
		out->not_before = when;
		if (avail)
			resolved.slurm_bit_free(&avail);
		if (job->resv_ptr && ((slurmctld_resv_t *) job->resv_ptr)->node_bitmap)
			avail = resolved.bit_copy(((slurmctld_resv_t *) job->resv_ptr)->node_bitmap);
		else
			avail = resolved.bit_copy(part->node_bitmap);
	} else {
		out->status = ENERGY_ROUTE_NOW;
		if (!job->resv_ptr) {
			/* Other reservations' windows are the planner's: start from the partition. */
			if (avail)
				resolved.slurm_bit_free(&avail);
			avail = resolved.bit_copy(part->node_bitmap);
		}
	}
	if (!avail) {
		out->status = ENERGY_ROUTE_NEVER;
		out->why = "no nodes";
		goto done;
	}
	resolved.bit_and(avail, part->node_bitmap);
	if (job->details->exc_node_bitmap)
		resolved.bit_and_not(avail, job->details->exc_node_bitmap);
	if (job->details->req_node_bitmap) {
		if (!resolved.bit_super_set(job->details->req_node_bitmap, avail)) {
			out->status = ENERGY_ROUTE_NEVER;
			out->why = "required nodes (--nodelist) not in the partition or reservation";
			goto done;
		}
		/* --nodelist names every node it needs: only those. Fewer than it needs: they
		 * must be among its nodes, which the planner cannot express; Slurm places it. */
		if (resolved.bit_set_count(job->details->req_node_bitmap) >=
		    (int64_t) job->details->min_nodes)
			resolved.bit_and(avail, job->details->req_node_bitmap);
		else
			out->filter_inexact = true;
	}
	/* Least-loaded-node selection (LLN=YES, CR_LLN) is the opposite of the planner's packing:
	 * Slurm places the partition's jobs. */
	if ((part->flags & PART_FLAG_LLN) || (resolved.slurm_conf->select_type_param & ENERGY_CR_LLN))
		out->filter_inexact = true;
	/* Features, node sizes and memory, as Slurm's own filter judges them. */
	job->details->features_use = job->details->features;
	job->details->feature_list_use = job->details->feature_list;
	if (resolved.job_req_node_filter(job, avail, true) != SLURM_SUCCESS)
		out->filter_inexact = true;
	out->nodes = avail;
	avail = NULL;
done:
	if (avail)
		resolved.slurm_bit_free(&avail);
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(24, 11, 0)
	resolved.reservation_delete_resv_exc_parts(&exc);
#else
	if (exc_cores)
		resolved.slurm_bit_free(&exc_cores);
#endif
	energy_route_undo(job, &saved);
}

const char *energy_route_apply(job_record_t *job, const char *part_name, const char *resv_name,
			       bool magnetic, energy_route_saved_t *saved)
{
	part_record_t *part;
	slurmctld_resv_t *resv = NULL;

	route_save(job, saved);
	if (!resolved_ok || !part_name)
		return "no partition";
	part = resolved.find_part_record((char *) part_name);
	if (!part)
		return "partition gone";
	if (job->part_ptr_list) {
		bool found = false;
		energy_list_itr_t it = resolved.list_iterator_create(job->part_ptr_list);
		part_record_t *p;

		while ((p = resolved.list_next(it)))
			if (p == part)
				found = true;
		resolved.list_iterator_destroy(it);
		if (!found)
			return "partition no longer the job's";
	} else if (job->part_ptr != part) {
		return "partition no longer the job's";
	}
	if (resv_name) {
		resv = resolved.find_resv_name((char *) resv_name);
		if (!resv)
			return "reservation gone";
		if (magnetic && job->resv_name)
			return "job now names a reservation";
		/* The job named this reservation when planned and no longer does (scontrol update
		 * ReservationName= meanwhile): applying the record now would bind it as if the
		 * reservation were magnetic. */
		if (!magnetic && !(job->resv_list || job->resv_name))
			return "job no longer names the reservation";
	} else if (job->resv_name && !magnetic) {
		/* Planned without a reservation, and the job names one now. */
		return "job now names a reservation";
	}
	job->part_ptr = part;
	if (resv)
		route_set_resv(job, part, resv, saved);
	return NULL;
}

bool energy_resv_at(int i, const char **name, bitstr_t **nodes, time_t *start, time_t *end)
{
	energy_list_itr_t it;
	slurmctld_resv_t *resv;
	int n = 0;
	bool found = false;

	if (!resolved_ok || !*resolved.resv_list)
		return false;
	it = resolved.list_iterator_create(*resolved.resv_list);
	while ((resv = resolved.list_next(it))) {
		/* FLEX reservations too: their member jobs may also use nodes outside them, but
		 * every other job is kept off their nodes like off any reservation's (the window
		 * never holds against the reservation's own jobs). */
		if (!resv->node_bitmap || !(resv->ctld_flags & RESV_CTLD_FULL_NODE))
			continue;
		if (n++ == i) {
			*name = resv->name;
			*nodes = resolved.bit_copy(resv->node_bitmap);
			*start = resv->start_time;
			*end = resv->end_time;
			found = true;
			break;
		}
	}
	resolved.list_iterator_destroy(it);
	return found;
}

void energy_schedule_state_save(void)
{
	if (!resolved_ok)
		return;
	resolved.schedule_node_save();
	resolved.schedule_job_save();
}

int energy_save_job_state(void)
{
	if (!resolved_ok)
		return -1;
	return shim_fns.dump_all_job_state();
}

int energy_prepare_batch_launch(job_record_t *job)
{
	if (!resolved_ok || !job || !job->batch_flag || job->het_job_id)
		return -1;
	if (shim_fns.pick_batch_host(job) != SLURM_SUCCESS)
		return -1;
	return shim_fns.build_batch_step(job) ? 0 : -1;
}

bool energy_job_first_node_registered(const job_record_t *job)
{
	int first;
	node_record_t *node;

	if (!resolved_ok || !job->node_bitmap)
		return false;
	first = shim_fns.bit_ffs(job->node_bitmap);
	if (first < 0 || first >= *resolved.node_record_count)
		return false;
	node = (*resolved.node_record_table_ptr)[first];
	return node && node->version;
}

/* What ping_nodes() passes for "any receiver" (auth.h, whose path changed in 23.02). */
#ifndef SLURM_AUTH_UID_ANY
#define SLURM_AUTH_UID_ANY -1
#endif

int energy_request_first_node_registration(const job_record_t *job)
{
	int first;
	node_record_t *node;
	agent_arg_t *args;

	if (!resolved_ok || !job->node_bitmap)
		return -1;
	first = shim_fns.bit_ffs(job->node_bitmap);
	if (first < 0 || first >= *resolved.node_record_count)
		return -1;
	node = (*resolved.node_record_table_ptr)[first];
	if (!node || !node->name)
		return -1;
	/* As ping_nodes() builds its registration requests; the agent frees it (xfree). */
	args = shim_fns.slurm_xcalloc(1, sizeof(*args), true, false, __FILE__, __LINE__, __func__);
	args->msg_type = REQUEST_NODE_REGISTRATION_STATUS;
	args->retry = 0;
	args->protocol_version = SLURM_PROTOCOL_VERSION;
	if (node->protocol_version && node->protocol_version < args->protocol_version)
		args->protocol_version = node->protocol_version;
	args->hostlist = shim_fns.hostlist_create(node->name);
	if (!args->hostlist) {
		void *p = args;
		resolved.slurm_xfree(&p);
		return -1;
	}
	args->node_count = 1;
	shim_fns.set_agent_arg_r_uid(args, SLURM_AUTH_UID_ANY);
	/* The agent calls ping_end() when a registration request is done; count it as ping_nodes()
	 * does, or slurmctld would end a ping cycle of its own early ("ping_count < 0"). */
	shim_fns.ping_begin();
	shim_fns.agent_queue_request(args);
	return 0;
}

bool energy_any_node_registered(void)
{
	if (!resolved_ok)
		return false;
	for (int i = 0; i < *resolved.node_record_count; i++) {
		node_record_t *node = (*resolved.node_record_table_ptr)[i];
		if (node && node->version)
			return true;
	}
	return false;
}

bool energy_job_no_node_left(const job_record_t *job)
{
	return resolved_ok && IS_JOB_RUNNING(job) &&
	       (job->node_cnt == 0 || !job->node_bitmap || shim_fns.bit_ffs(job->node_bitmap) < 0);
}

int energy_job_complete_missing(job_record_t *job, bool may_requeue)
{
	bool requeue = may_requeue && job->details && job->details->requeue;
	/*
	 * A running job none of whose nodes is left: their epilog completions reached this
	 * slurmctld (the job ended there before the previous slurmctld died, which had sent the
	 * kill and not saved the end), and make_node_idle() took each node off the job.
	 * job_complete() then releases nothing (node_cnt 0 reads as "resources given to another
	 * job"): its cores, memory, GRES and limits would stay allocated with no job. Released
	 * afterwards as _job_timed_out() releases such a job at its time limit (deallocate_nodes()).
	 */
	bool no_node_left = IS_JOB_RUNNING(job) && job->node_cnt == 0;
	int rc;

	if (!resolved_ok)
		return -1;
	job->exit_code = 1;
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(25, 11, 0)
	/* 25.11 names the job by its step id (no SLUID: found by job id). */
	slurm_step_id_t step_id = { .sluid = 0, .job_id = job->job_id,
				    .step_het_comp = NO_VAL, .step_id = NO_VAL };
	rc = shim_fns.job_complete(&step_id, (*resolved.slurm_conf).slurm_user_id,
				   requeue, true, NO_VAL);
#else
	rc = shim_fns.job_complete(job->job_id, (*resolved.slurm_conf).slurm_user_id,
				   requeue, true, NO_VAL);
#endif
	if (rc == SLURM_SUCCESS && no_node_left && job->details)
		(void) shim_fns.deallocate_nodes(job, false, false, false);
	return rc;
}

bool energy_job_waits_for_prolog(const job_record_t *job)
{
	if (!resolved_ok || job->state_reason != WAIT_PROLOG || !job->node_bitmap_pr)
		return false;
	return shim_fns.bit_ffs(job->node_bitmap_pr) >= 0;
}

bool energy_job_prolog_nodes_registered(const job_record_t *job)
{
	int n;

	if (!resolved_ok || !job->node_bitmap_pr)
		return false;
	n = MIN((int) resolved.bit_size(job->node_bitmap_pr), *resolved.node_record_count);
	for (int i = 0; i < n; i++) {
		node_record_t *node;

		if (!ENERGY_BIT_TEST_CALL(job->node_bitmap_pr, i))
			continue;
		node = (*resolved.node_record_table_ptr)[i];
		if (!node || !node->version)
			return false;
	}
	return true;
}

int energy_job_finish_lost_prolog(job_record_t *job)
{
	if (!resolved_ok)
		return -1;
	/* No node name: prolog_complete() clears every node the job still waits for. */
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(25, 11, 0)
	/* 25.11 takes the RPC's message; no SLUID: found by job id. */
	prolog_complete_msg_t msg = {
		.node_name = NULL,
		.prolog_rc = 0,
		.step_id = { .sluid = 0, .job_id = job->job_id,
			     .step_het_comp = NO_VAL, .step_id = NO_VAL },
	};
	return shim_fns.prolog_complete(&msg);
#else
	return shim_fns.prolog_complete(job->job_id, 0, NULL);
#endif
}

void energy_drop_batch_step(job_record_t *job)
{
	slurm_step_id_t id = {
		.job_id = job->job_id,
		.step_id = SLURM_BATCH_SCRIPT,
		.step_het_comp = NO_VAL,
	};
	step_record_t *step;

	if (!resolved_ok || !job->step_list)
		return;
	step = shim_fns.find_step_record(job, &id);
	if (step)
		shim_fns.delete_step_record(job, step);
}

/* The job's batch step record, or NULL. */
static step_record_t *batch_step_of(const job_record_t *job)
{
	slurm_step_id_t id = {
		.job_id = job->job_id,
		.step_id = SLURM_BATCH_SCRIPT,
		.step_het_comp = NO_VAL,
	};

	if (!resolved_ok || !job->step_list)
		return NULL;
	return shim_fns.find_step_record((job_record_t *) job, &id);
}

int energy_batch_step_reported(const job_record_t *job)
{
	step_record_t *step = batch_step_of(job);

	if (!step)
		return -1;
	return step->time_last_active != 0;
}

void energy_batch_step_forget_report(job_record_t *job)
{
	step_record_t *step = batch_step_of(job);

	if (step)
		step->time_last_active = 0;
}

int energy_server_thread_count(void)
{
	int n;

	if (!resolved_ok)
		return 0;
	pthread_mutex_lock(&resolved.slurmctld_config->thread_count_lock);
	n = resolved.slurmctld_config->server_thread_count;
	pthread_mutex_unlock(&resolved.slurmctld_config->thread_count_lock);
	return n;
}

bool energy_shutting_down(void)
{
	return resolved_ok && resolved.slurmctld_config->shutdown_time != 0;
}

void energy_diag_cycle_end(uint64_t cycle_usec, uint32_t depth, uint32_t depth_try,
			   uint32_t queue_len, uint32_t started, time_t now)
{
	diag_stats_t *d;

	if (!resolved_ok)
		return;
	d = resolved.slurmctld_diag_stats;
	d->bf_active = 0;
	d->bf_cycle_counter++;
	d->bf_cycle_last = (uint32_t) cycle_usec;
	d->bf_cycle_sum += cycle_usec;
	if (d->bf_cycle_last > d->bf_cycle_max)
		d->bf_cycle_max = d->bf_cycle_last;
	d->bf_last_depth = depth;
	d->bf_last_depth_try = depth_try;
	d->bf_depth_sum += depth;
	d->bf_depth_try_sum += depth_try;
	d->bf_queue_len = queue_len;
	d->bf_queue_len_sum += queue_len;
	d->bf_when_last_cycle = now;
	d->backfilled_jobs += started;
	d->last_backfilled_jobs += started;
}

static uint32_t min_limit(uint32_t a, uint32_t b)
{
	if (b == INFINITE || b == NO_VAL || b == 0)
		return a;
	return (b < a) ? b : a;
}

/* The minutes a job may run under a TRES-minutes limit per job (MaxTRESMinsPerJob):
 * the limit of each TRES the job holds over its count. `mins` NULL: no such limit. */
static uint32_t tres_mins_cap(const uint64_t *mins, const uint64_t *held)
{
	uint32_t cap = INFINITE;

	if (!mins || !held)
		return INFINITE;
	for (uint32_t i = 0; i < *resolved.g_tres_count; i++) {
		if ((mins[i] == INFINITE64) || (mins[i] == NO_VAL64) || !held[i] ||
		    (held[i] == NO_VAL64) || (held[i] == INFINITE64))
			continue;
		cap = MIN(cap, (uint32_t) MIN(mins[i] / held[i], (uint64_t) INFINITE - 1));
	}
	return cap;
}

/* A group limit on running TRES-minutes (GrpTRESRunMins) on a TRES the job holds: what it
 * allows depends on every other running job of the group, so the limit the job started with
 * (which Slurm checked) is the one it keeps. */
static bool tres_run_mins_limited(const uint64_t *run_mins, const uint64_t *held)
{
	if (!run_mins || !held)
		return false;
	for (uint32_t i = 0; i < *resolved.g_tres_count; i++)
		if ((run_mins[i] != INFINITE64) && (run_mins[i] != NO_VAL64) && held[i] &&
		    (held[i] != NO_VAL64))
			return true;
	return false;
}

uint32_t energy_job_limit_cap(const job_record_t *job, time_t now)
{
	assoc_mgr_lock_t locks = { .assoc = READ_LOCK, .qos = READ_LOCK };
	uint32_t cap = INFINITE;
	time_t from;

	if (!resolved_ok || !job)
		return INFINITE;
	if (job->limit_set.time == ADMIN_SET_LIMIT)
		return job->time_limit; /* an admin chose this limit */
	if (job->part_ptr)
		cap = min_limit(cap, job->part_ptr->max_time);
	/* Never past the job's deadline. */
	from = (job->start_time > 0 && !IS_JOB_PENDING(job)) ? job->start_time : now;
	if (job->deadline && (job->deadline != NO_VAL)) {
		uint32_t left_min = (job->deadline > from) ? (uint32_t) ((job->deadline - from) / 60) : 0;

		cap = MIN(cap, left_min);
	}
	resolved.assoc_mgr_lock(&locks);
	if (job->qos_ptr)
		cap = min_limit(cap, ((slurmdb_qos_rec_t *) job->qos_ptr)->max_wall_pj);
	if (job->part_ptr && job->part_ptr->qos_ptr)
		cap = min_limit(cap, ((slurmdb_qos_rec_t *) job->part_ptr->qos_ptr)->max_wall_pj);
	if (job->assoc_ptr)
		cap = min_limit(cap, ((slurmdb_assoc_rec_t *) job->assoc_ptr)->max_wall_pj);
	{
		/* TRES-minutes: what the job holds (running) or asks for (pending). */
		const uint64_t *held = job->tres_alloc_cnt ? job->tres_alloc_cnt : job->tres_req_cnt;
		const slurmdb_qos_rec_t *qos = job->qos_ptr;
		const slurmdb_qos_rec_t *part_qos = job->part_ptr ? job->part_ptr->qos_ptr : NULL;
		const slurmdb_assoc_rec_t *assoc = job->assoc_ptr;
		bool run_mins = false;

		if (qos) {
			cap = MIN(cap, tres_mins_cap(qos->max_tres_mins_pj_ctld, held));
			run_mins |= tres_run_mins_limited(qos->grp_tres_run_mins_ctld, held);
		}
		if (part_qos) {
			cap = MIN(cap, tres_mins_cap(part_qos->max_tres_mins_pj_ctld, held));
			run_mins |= tres_run_mins_limited(part_qos->grp_tres_run_mins_ctld, held);
		}
		if (assoc)
			cap = MIN(cap, tres_mins_cap(assoc->max_tres_mins_ctld, held));
		for (; assoc; assoc = assoc->usage ? assoc->usage->parent_assoc_ptr : NULL)
			run_mins |= tres_run_mins_limited(assoc->grp_tres_run_mins_ctld, held);
		if (run_mins && (job->time_limit != NO_VAL) && (job->time_limit != INFINITE))
			cap = MIN(cap, job->time_limit);
	}
	resolved.assoc_mgr_unlock(&locks);
	return cap;
}

bool energy_extend_time_limit(job_record_t *job, uint32_t limit_min, uint32_t *old_min,
			      uint32_t *new_min)
{
	uint32_t old, cap;

	if (!resolved_ok || !job)
		return false;
	old = job->time_limit;
	if (old == INFINITE || old == NO_VAL || old == 0 || limit_min <= old)
		return false;
	if (!(IS_JOB_RUNNING(job) || IS_JOB_SUSPENDED(job)) || job->preempt_time)
		return false;
	if (job->limit_set.time == ADMIN_SET_LIMIT)
		return false; /* an admin chose this limit */
	cap = MIN(limit_min, energy_job_limit_cap(job, time(NULL)));
	if (cap <= old)
		return false;
	resolved.acct_policy_alter_job(job, cap);
	job->time_limit = cap;
	job->end_time += (time_t) (cap - old) * 60;
	job->end_time_exp = job->end_time;
	*resolved.last_job_update = time(NULL);
	if (*resolved.acct_db_conn)
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(24, 11, 0)
		resolved.jobacct_storage_g_job_start(*resolved.acct_db_conn, job);
#else
		resolved.jobacct_storage_job_start_direct(*resolved.acct_db_conn, job);
#endif
	*old_min = old;
	*new_min = cap;
	return true;
}

void energy_job_wait_resources(job_record_t *job)
{
	if (!job || !IS_JOB_PENDING(job))
		return;
	/* A reason written out in words (state_desc) says more: keep it. */
	if (job->state_desc)
		return;
	if (job->state_reason == WAIT_NO_REASON || job->state_reason == WAIT_PRIORITY)
		job->state_reason = WAIT_RESOURCES;
}

void energy_job_wait_priority(job_record_t *job)
{
	if (!job || !IS_JOB_PENDING(job))
		return;
	if (job->state_desc)
		return;
	if (job->state_reason == WAIT_NO_REASON || job->state_reason == WAIT_RESOURCES)
		job->state_reason = WAIT_PRIORITY;
}

/* Whether `entry` is `name=...` or `SPANK_name=...`. */
static bool spank_entry_is(const char *entry, const char *name)
{
	size_t len = strlen(name);

	if (!entry)
		return false;
	if (!strncmp(entry, "SPANK_", 6))
		entry += 6;
	return !strncmp(entry, name, len) && entry[len] == '=';
}

int energy_job_set_spank_env(job_record_t *job, const char *name, const char *value)
{
	uint32_t i, kept = 0;
	int removed = 0;
	char *entry;

	if (!job || !name || !*name || !resolved_ok)
		return 0;
	for (i = 0; i < job->spank_job_env_size; i++) {
		if (spank_entry_is(job->spank_job_env[i], name)) {
			resolved.slurm_xfree((void **) &job->spank_job_env[i]);
			removed++;
			continue;
		}
		job->spank_job_env[kept++] = job->spank_job_env[i];
	}
	for (i = kept; i < job->spank_job_env_size; i++)
		job->spank_job_env[i] = NULL;
	job->spank_job_env_size = kept;
	if (!value)
		return removed;
	/* One more slot and the NULL that ends the array (xduparray copies by size; the state
	 * file and the messages use the size too, the terminator keeps env-style readers safe). */
	resolved.slurm_xrecalloc((void **) &job->spank_job_env, kept + 2, sizeof(char *), true,
				 false, __FILE__, __LINE__, __func__);
	entry = NULL;
	{
		size_t n = strlen(name) + 1 + strlen(value) + 1;
		entry = resolved.slurm_xrecalloc((void **) &entry, 1, n, true, false, __FILE__,
						 __LINE__, __func__);
		snprintf(entry, n, "%s=%s", name, value);
	}
	job->spank_job_env[kept] = entry;
	job->spank_job_env[kept + 1] = NULL;
	job->spank_job_env_size = kept + 1;
	return removed;
}

int energy_will_run(job_record_t *job, bitstr_t *candidates, time_t *start, bitstr_t **nodes)
{
	uint32_t min_nodes = 0, req_nodes = 0, max_nodes = 0, qos_flags = 0;
	uint16_t orig_shared;
	bitstr_t *avail;
	int rc;
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(24, 11, 0)
	/* No reservation's cores held back (22.05's NULL exc_core_bitmap); cons_tres reads the
	 * record without a NULL check, so it must exist. */
	resv_exc_t exc;

	memset(&exc, 0, sizeof(exc));
#define ENERGY_JOB_TEST(bitmap) \
	resolved.select_g_job_test(job, bitmap, min_nodes, max_nodes, req_nodes, \
				   SELECT_MODE_WILL_RUN, NULL, NULL, &exc, NULL)
#else
#define ENERGY_JOB_TEST(bitmap) \
	resolved.select_g_job_test(job, bitmap, min_nodes, max_nodes, req_nodes, \
				   SELECT_MODE_WILL_RUN, NULL, NULL, NULL)
#endif

	*nodes = NULL;
	if (!resolved_ok || !job || !job->details || !job->part_ptr || !candidates)
		return SLURM_ERROR;
	if (job->qos_ptr)
		qos_flags = ((slurmdb_qos_rec_t *) job->qos_ptr)->flags;
	rc = resolved.get_node_cnts(job, qos_flags, job->part_ptr, &min_nodes, &req_nodes,
				    &max_nodes);
	if (rc != SLURM_SUCCESS)
		return rc;
	if (resolved.bit_set_count(candidates) < min_nodes)
		return ESLURM_NODES_BUSY;
	/* sched/backfill's order: exclusive first (the earliest start), then as requested. */
	orig_shared = job->details->share_res;
	job->details->share_res = 0;
	avail = resolved.bit_copy(candidates);
	rc = ENERGY_JOB_TEST(avail);
	job->details->share_res = orig_shared;
	if (((rc != SLURM_SUCCESS) || (job->start_time > time(NULL))) && orig_shared) {
		resolved.slurm_bit_free(&avail);
		avail = resolved.bit_copy(candidates);
		rc = ENERGY_JOB_TEST(avail);
	}
#undef ENERGY_JOB_TEST
	if (rc != SLURM_SUCCESS) {
		resolved.slurm_bit_free(&avail);
		return rc;
	}
	*start = job->start_time;
	*nodes = avail;
	return SLURM_SUCCESS;
}

bool energy_job_acct_policy_runnable(job_record_t *job)
{
	if (!resolved_ok || !job)
		return false;
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(24, 11, 0)
	if (!resolved.job_state_reason_check(job->state_reason, JSR_QOS_ASSOC))
		return true;
#else
	if (resolved.acct_policy_job_runnable_state(job))
		return true;
#endif
	return resolved.acct_policy_job_runnable_pre_select(job, false);
}

bool energy_refusal_is_about_nodes(int rc)
{
	/* A limit, or a burst buffer still staging in (select_nodes started the stage-in and set
	 * the reason): about the job, not the nodes it was given. */
	return (rc != ESLURM_ACCOUNTING_POLICY) && (rc != ESLURM_BURST_BUFFER_WAIT);
}

void energy_bb_try_stage_in(void)
{
	if (resolved_ok)
		(void) resolved.bb_g_job_try_stage_in();
}
