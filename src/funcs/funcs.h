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

/* The layer's hash tables are open addressing over indexes: a slot holds index + 1, 0 is
 * empty, linear probing, at most half full. Grow *slots (mask *mask) to twice its size (64
 * at first) and place entries first..n-1 again, entry i at hash(ctx, i). 0 or SW_ENOMEM. */
int sw__slots_grow(uint32_t **slots, uint32_t *mask, uint32_t first, uint32_t n,
                   uint32_t (*hash)(const void *ctx, uint32_t i), const void *ctx);

#endif /* SW_FUNCS_H */
