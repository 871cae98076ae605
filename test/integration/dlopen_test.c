/*
 * dlopen()s the installed plugin (argv[1]) into a process that links only
 * UCX's public libraries, then checks that the component registered and that
 * the plugin exports none of its internals.
 */
#include <uct/api/uct.h>

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static int component_registered(const char *name)
{
    uct_component_h *components;
    unsigned num, i;
    int found = 0;

    if (uct_query_components(&components, &num) != UCS_OK) {
        return -1;
    }
    for (i = 0; i < num; ++i) {
        uct_component_attr_t attr;
        attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME;
        if ((uct_component_query(components[i], &attr) == UCS_OK) &&
            (strcmp(attr.name, name) == 0)) {
            found = 1;
        }
    }
    uct_release_component_list(components);
    return found;
}

int main(int argc, char **argv)
{
    static const char *hidden[] = {
        "_ZN3xqp9component9componentE",     /* xqp::component::component */
        "_ZN3xqp9component17register_with_ucxEv",
        "_ZN3xqp5iface2tlE",
        "xqp_plugin_load",
    };
    void *handle;
    size_t i;
    int failed = 0;

    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH/libuct_xqp.so.0\n", argv[0]);
        return 2;
    }
    if (component_registered("xqp") != 0) {
        fprintf(stderr, "FAIL: xqp registered before the plugin was loaded\n");
        return 1;
    }
    handle = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        fprintf(stderr, "FAIL: dlopen(%s): %s\n", argv[1], dlerror());
        return 1;
    }
    if (component_registered("xqp") != 1) {
        fprintf(stderr, "FAIL: component xqp not registered after dlopen\n");
        failed = 1;
    }
    for (i = 0; i < sizeof(hidden) / sizeof(hidden[0]); ++i) {
        if (dlsym(handle, hidden[i]) != NULL) {
            fprintf(stderr, "FAIL: internal symbol %s is exported\n", hidden[i]);
            failed = 1;
        }
    }
    if (dlclose(handle) != 0) {
        fprintf(stderr, "FAIL: dlclose: %s\n", dlerror());
        return 1;
    }
    /* a library may legitimately stay mapped after dlclose (e.g. it has
     * unique C++ symbols); the component list must match either way */
    handle = dlopen(argv[1], RTLD_NOW | RTLD_NOLOAD);
    if ((handle == NULL) && (component_registered("xqp") != 0)) {
        fprintf(stderr, "FAIL: plugin unloaded but component xqp still registered\n");
        failed = 1;
    } else if ((handle != NULL) && (component_registered("xqp") != 1)) {
        fprintf(stderr, "FAIL: plugin still loaded but component xqp lost\n");
        failed = 1;
    }
    if (!failed) {
        printf("dlopen %s: component registered, internals hidden, %s\n", argv[1],
               handle ? "still mapped after dlclose" : "unregistered on unload");
    }
    return failed;
}
