/*
 * funcs.h — what the files of the funcs layer share (private). The layer's API is
 * include/stepwatch/functions.h; README.md here says what the layer owns.
 */
#ifndef SW_FUNCS_H
#define SW_FUNCS_H

#include "core/core.h"
#include "stepwatch/functions.h"

/* The index of the first tree of action in fp, or SW_FNODE_NONE. */
uint32_t sw__fprofile_first_tree(const sw_fprofile *fp, const char *action);
/* The profile a tree belongs to. */
sw_fprofile *sw__ftree_profile(const sw_ftree *t);

#endif /* SW_FUNCS_H */
