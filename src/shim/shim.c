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
#include <string.h>

#include "shim.h"

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

uint32_t energy_gres_conf_env_nvml(void)
{
	return GRES_CONF_ENV_NVML;
}

int energy_gres_step_data_bitmap(void)
{
	return GRES_STEP_DATA_BITMAP;
}

int energy_gres_job_data_bitmap(void)
{
	return GRES_JOB_DATA_BITMAP;
}

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

bool energy_job_is_configuring(const job_record_t *job)
{
	return IS_JOB_CONFIGURING(job);
}

bool energy_node_is_unusable(const node_record_t *node)
{
	return IS_NODE_DOWN(node) || IS_NODE_DRAIN(node) || IS_NODE_FAIL(node) ||
	       IS_NODE_FUTURE(node) || IS_NODE_NO_RESPOND(node) ||
	       IS_NODE_MAINT(node) || IS_NODE_REBOOT_REQUESTED(node) ||
	       IS_NODE_REBOOT_ISSUED(node) || IS_NODE_POWERING_DOWN(node) ||
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
	return CR_MEMORY;
}
