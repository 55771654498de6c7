/* category.c — the common vocabulary: which category (data, forward, ..., other) a name is. */
#include "stepwatch.h"

#include <string.h>

static const char *const category_names[SW_CAT_COUNT] = {"data",     "forward",    "loss",
                                                         "backward", "optimizer",  "zero_grad",
                                                         "callback", "collective", "other"};

const char *sw_category_name(sw_category cat) {
    if ((unsigned)cat >= SW_CAT_COUNT)
        return NULL;
    return category_names[cat];
}

sw_category sw_category_of(const char *name) {
    if (name == NULL)
        return SW_CAT_OTHER;
    if (strncmp(name, "callback:", 9) == 0)
        return SW_CAT_CALLBACK;
    /* A collective (collective:all_reduce, its :wait, MPI's): the rank communicates or waits
     * for the others, which the ranks view tells apart from its own work. */
    if (strcmp(name, "collective") == 0 || strncmp(name, "collective:", 11) == 0)
        return SW_CAT_COLLECTIVE;
    if (strcmp(name, "h2d_copy") == 0) /* the batch's copy to the device: part of its data */
        return SW_CAT_DATA;
    for (int c = 0; c < SW_CAT_CALLBACK; c++)
        if (strcmp(name, category_names[c]) == 0)
            return (sw_category)c;
    return SW_CAT_OTHER;
}
