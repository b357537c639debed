/*
 * slurm-energy: readers of slurmstepd's step record (see shim.h). Kept apart from shim.c
 * because slurmstepd's header is only needed here.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#define _GNU_SOURCE
#include "shim.h"

#include "src/slurmd/slurmstepd/slurmstepd_job.h"

void *energy_stepd_step_gres_list(const void *step)
{
	const stepd_step_rec_t *s = step;

	return s ? (void *) s->step_gres_list : NULL;
}

void *energy_stepd_job_gres_list(const void *step)
{
	const stepd_step_rec_t *s = step;

	return s ? (void *) s->job_gres_list : NULL;
}

void energy_stepd_ids(const void *step, uint32_t *job_id, uint32_t *step_id)
{
	const stepd_step_rec_t *s = step;

	*job_id = s ? s->step_id.job_id : 0;
	*step_id = s ? s->step_id.step_id : 0;
}

#include <dlfcn.h>
#include "src/slurmd/slurmd/slurmd.h"

const char *energy_slurmd_node_name(void)
{
	/* slurmd's and slurmstepd's `conf` (slurmd_conf_t *); absent elsewhere. */
	slurmd_conf_t **c = (slurmd_conf_t **) dlsym(RTLD_DEFAULT, "conf");

	if (!c || !*c)
		return NULL;
	return (*c)->node_name;
}
