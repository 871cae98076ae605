# xqp configure helpers.

# AX_XQP_CXX20: the C++ compiler must accept C++20.
AC_DEFUN([AX_XQP_CXX20], [
    AC_MSG_CHECKING([whether $CXX accepts -std=c++20])
    xqp_save_CXXFLAGS=$CXXFLAGS
    CXXFLAGS="$CXXFLAGS -std=c++20"
    AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[#include <optional>
                                         #include <string_view>]],
                                       [[std::optional<std::string_view> s; return s.has_value();]])],
        [AC_MSG_RESULT([yes])],
        [AC_MSG_RESULT([no])
         AC_MSG_ERROR([a C++20 compiler is required])])
    CXXFLAGS=$xqp_save_CXXFLAGS
    AC_SUBST([XQP_CXXSTD], [-std=c++20])
])

# XQP_CHECK_LIB(option, description, header, prefix, function, library)
# --with-OPTION=yes|no|DIR for a required library. Sets PREFIX_CPPFLAGS,
# PREFIX_LDFLAGS and PREFIX_LIBS.
AC_DEFUN([XQP_CHECK_LIB], [
    AC_ARG_WITH([$1],
        [AS_HELP_STRING([--with-$1=yes|DIR], [$2 (required; DIR is its install prefix)])],
        [], [with_$1=yes])
    AS_CASE(["$with_$1"],
        [no], [AC_MSG_ERROR([--without-$1: xqp cannot be built without $2])],
        [yes|""], [xqp_$1_prefix=],
        [AS_IF([test -d "$with_$1"], [xqp_$1_prefix=$with_$1],
               [AC_MSG_ERROR([--with-$1=$with_$1: no such directory])])])
    $4_CPPFLAGS=
    $4_LDFLAGS=
    AS_IF([test -n "$xqp_$1_prefix"], [
        $4_CPPFLAGS="-I$xqp_$1_prefix/include"
        AS_IF([test -d "$xqp_$1_prefix/lib64"],
              [$4_LDFLAGS="-L$xqp_$1_prefix/lib64 -Wl,-rpath,$xqp_$1_prefix/lib64"],
              [$4_LDFLAGS="-L$xqp_$1_prefix/lib -Wl,-rpath,$xqp_$1_prefix/lib"])])
    xqp_save_CPPFLAGS=$CPPFLAGS
    xqp_save_LDFLAGS=$LDFLAGS
    CPPFLAGS="$CPPFLAGS $$4_CPPFLAGS"
    LDFLAGS="$LDFLAGS $$4_LDFLAGS"
    AC_CHECK_HEADER([$3], [],
        [AC_MSG_ERROR([$2 header $3 not found${xqp_$1_prefix:+ under $xqp_$1_prefix/include}; on Debian install its -dev package (contrib/bootstrap.sh does) or pass --with-$1=DIR])])
    AC_CHECK_LIB([$6], [$5], [$4_LIBS=-l$6],
        [AC_MSG_ERROR([$2 library lib$6 not found or unusable${xqp_$1_prefix:+ under $xqp_$1_prefix}; pass --with-$1=DIR])])
    CPPFLAGS=$xqp_save_CPPFLAGS
    LDFLAGS=$xqp_save_LDFLAGS
    xqp_$1_summary="${xqp_$1_prefix:-system} ($$4_LIBS)"
    AC_SUBST([$4_CPPFLAGS])
    AC_SUBST([$4_LDFLAGS])
    AC_SUBST([$4_LIBS])
])

# XQP_UCX_SRC_VERSION(dir): prints MAJOR.MINOR.PATCH of a UCX source tree.
AC_DEFUN([XQP_UCX_SRC_VERSION], [`
    for xqp_v in major minor patch; do
        $GREP "^def.*ucx_ver_$xqp_v" "$1/configure.ac" | head -n 1 | cut -d, -f2 | cut -d')' -f1 | tr -d ' '

    done | tr '\n' . | $SED 's/\.$//'`])

# XQP_CHECK_UCX: installed UCX (public headers + libraries + ucx_info), the
# matching source tree for the internal headers, and the build configuration
# header regenerated from `ucx_info -b`.
AC_DEFUN([XQP_CHECK_UCX], [
    AC_ARG_WITH([ucx],
        [AS_HELP_STRING([--with-ucx=PREFIX], [installed UCX (default: pkg-config, then the system)])],
        [], [with_ucx=yes])
    AC_ARG_WITH([ucx-src],
        [AS_HELP_STRING([--with-ucx-src=DIR],
            [source tree of the installed UCX version (required: UCX installs no internal headers; Debian: apt-get source ucx, or contrib/bootstrap.sh)])],
        [], [with_ucx_src=])
    AC_ARG_ENABLE([ucx-compile-only],
        [AS_HELP_STRING([--enable-ucx-compile-only],
            [compile-only check (contrib/compat-check.sh): accept a configured UCX source tree of another release than the installed one and take its build configuration from the tree's config.h; what is built then must not be installed])],
        [], [enable_ucx_compile_only=no])
    AC_ARG_WITH([ucx-moduledir],
        [AS_HELP_STRING([--with-ucx-moduledir=DIR], [where the plugin is installed (default: LIBDIR/ucx, where UCX looks for modules)])],
        [], [with_ucx_moduledir='${libdir}/ucx'])

    AS_CASE(["$with_ucx"],
        [no], [AC_MSG_ERROR([--without-ucx: xqp is a UCX plugin and needs UCX])],
        [yes|""], [
            PKG_CHECK_MODULES([UCX], [ucx-uct ucx-ucs], [],
                [UCX_CFLAGS=; UCX_LIBS="-luct -lucs"])
            AS_IF([test -n "$PKG_CONFIG"],
                  [UCX_LIBDIR=`$PKG_CONFIG --variable=libdir ucx-uct 2>/dev/null`])
            XQP_UCX_PREFIX_SUMMARY=system
            xqp_ucx_path=$PATH],
        [AS_IF([test -d "$with_ucx"], [],
               [AC_MSG_ERROR([--with-ucx=$with_ucx: no such directory])])
         UCX_LIBDIR=$with_ucx/lib
         AS_IF([test -e "$with_ucx/lib64/libuct.so"], [UCX_LIBDIR=$with_ucx/lib64])
         dnl -isystem: warnings in UCX's own headers are not ours
         UCX_CFLAGS="-isystem $with_ucx/include"
         UCX_LIBS="-L$UCX_LIBDIR -Wl,-rpath,$UCX_LIBDIR -luct -lucs"
         XQP_UCX_PREFIX_SUMMARY=$with_ucx
         xqp_ucx_path=$with_ucx/bin])
    AC_SUBST([UCX_LIBDIR])

    xqp_save_CPPFLAGS=$CPPFLAGS
    xqp_save_LIBS=$LIBS
    CPPFLAGS="$CPPFLAGS $UCX_CFLAGS"
    LIBS="$UCX_LIBS $LIBS"
    AC_CHECK_HEADER([uct/api/uct.h], [],
        [AC_MSG_ERROR([UCX headers (uct/api/uct.h) not found: install libucx-dev or pass --with-ucx=PREFIX])])
    AC_COMPUTE_INT([xqp_ucx_major], [UCT_VERNO_MAJOR], [[#include <uct/api/version.h>]],
        [AC_MSG_ERROR([cannot read UCT_VERNO_MAJOR from uct/api/version.h])])
    AC_COMPUTE_INT([xqp_ucx_minor], [UCT_VERNO_MINOR], [[#include <uct/api/version.h>]],
        [AC_MSG_ERROR([cannot read UCT_VERNO_MINOR from uct/api/version.h])])
    dnl UCT_VERNO_PATCH from UCX 1.13 on; before, only UCT_VERNO_STRING has it
    AC_COMPUTE_INT([xqp_ucx_patch], [UCT_VERNO_PATCH], [[#include <uct/api/version.h>]],
        [AC_COMPUTE_INT([xqp_ucx_patch], [xqp_patch_of(UCT_VERNO_STRING)], [[#include <uct/api/version.h>
constexpr unsigned xqp_number(const char *s, unsigned v)
{ return ((*s >= '0') && (*s <= '9')) ? xqp_number(s + 1, v * 10 + unsigned(*s - '0')) : v; }
constexpr unsigned xqp_patch_of(const char *s, int dots = 0)
{ return (dots == 2) ? xqp_number(s, 0) : (*s == 0) ? 0 : xqp_patch_of(s + 1, dots + (*s == '.')); }]],
            [AC_MSG_ERROR([cannot read UCT_VERNO_PATCH or UCT_VERNO_STRING from uct/api/version.h])])])
    XQP_UCX_VERSION=$xqp_ucx_major.$xqp_ucx_minor.$xqp_ucx_patch
    XQP_UCX_INSTALLED_VERSION=$XQP_UCX_VERSION
    AC_MSG_CHECKING([whether the UCX libraries link])
    AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <uct/api/uct.h>]],
                                    [[uct_component_h *c; unsigned n; return uct_query_components(&c, &n) != UCS_OK;]])],
        [AC_MSG_RESULT([yes])],
        [AC_MSG_RESULT([no])
         AC_MSG_ERROR([cannot link with UCX ($UCX_LIBS)])])
    CPPFLAGS=$xqp_save_CPPFLAGS
    LIBS=$xqp_save_LIBS

    AS_IF([test "$enable_ucx_compile_only" != yes], [
        dnl the installed UCX's own tool regenerates its build configuration
        AC_PATH_PROG([UCX_INFO], [ucx_info], [], [$xqp_ucx_path])
        AS_IF([test -z "$UCX_INFO"],
              [AC_MSG_ERROR([ucx_info not found (Debian: ucx-utils): it is needed to regenerate UCX's build configuration])])
        AC_MSG_CHECKING([the version ucx_info reports])
        xqp_info_version=`LD_LIBRARY_PATH=$UCX_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} $UCX_INFO -v 2>/dev/null | $SED -n -e 's/^# *Version \(@<:@0-9.@:>@*\).*/\1/p' -e 's/^# *Library version: *\(@<:@0-9.@:>@*\).*/\1/p' -e 's/^# *UCT version=\(@<:@0-9.@:>@*\).*/\1/p'`
        AC_MSG_RESULT([$xqp_info_version])
        AS_IF([test "$xqp_info_version" != "$XQP_UCX_VERSION"],
              [AC_MSG_ERROR([ucx_info ($UCX_INFO) reports UCX '$xqp_info_version' but the headers are UCX $XQP_UCX_VERSION: point --with-ucx at one installation])])
    ])

    AC_MSG_CHECKING([for the UCX $XQP_UCX_VERSION source tree])
    AS_IF([test -z "$with_ucx_src" || test "$with_ucx_src" = yes || test "$with_ucx_src" = no],
          [AC_MSG_RESULT([missing])
           AC_MSG_ERROR([--with-ucx-src=DIR is required: UCX installs no internal headers, so xqp builds against the UCX $XQP_UCX_VERSION source tree (Debian: add a deb-src line and run 'apt-get source ucx', or run contrib/bootstrap.sh)])])
    AS_IF([test -f "$with_ucx_src/src/uct/base/uct_iface.h" && test -f "$with_ucx_src/configure.ac"], [],
          [AC_MSG_RESULT([no])
           AC_MSG_ERROR([--with-ucx-src=$with_ucx_src is not a UCX source tree (no src/uct/base/uct_iface.h or configure.ac)])])
    with_ucx_src=`cd "$with_ucx_src" && pwd`
    xqp_src_version=XQP_UCX_SRC_VERSION([$with_ucx_src])
    AC_MSG_RESULT([$with_ucx_src (version $xqp_src_version)])
    AS_IF([test "$enable_ucx_compile_only" = yes], [
        dnl another release's tree, to compile against only: its own public
        dnl headers (never the installed ones) and its configure's config.h
        AS_IF([test -f "$with_ucx_src/config.h" && test -f "$with_ucx_src/src/uct/api/version.h"], [],
              [AC_MSG_ERROR([--enable-ucx-compile-only: $with_ucx_src is not configured (no config.h or src/uct/api/version.h); run its configure first, or use contrib/compat-check.sh])])
        XQP_UCX_VERSION=$xqp_src_version
        UCX_CFLAGS=
        AC_MSG_WARN([compile-only configuration against UCX $xqp_src_version (installed: $XQP_UCX_INSTALLED_VERSION): do not install or load what is built here])
    ], [test "$xqp_src_version" != "$XQP_UCX_VERSION"], [
        AC_MSG_ERROR([the UCX source tree $with_ucx_src is version '$xqp_src_version' but the installed UCX is $XQP_UCX_VERSION: internal structures differ between versions, use the matching source])])

    mkdir -p ucx-private
    AS_IF([test "$enable_ucx_compile_only" = yes], [
        AC_MSG_CHECKING([for UCX's build configuration ($with_ucx_src/config.h)])
        xqp_build_config_from="$with_ucx_src/config.h"
        cp "$with_ucx_src/config.h" ucx-private/ucx_info_b.txt
        XQP_UCX_BUILD_CONFIG_SUMMARY="$with_ucx_src/config.h (compile-only)"
    ], [
        AC_MSG_CHECKING([for UCX's build configuration (ucx_info -b)])
        xqp_build_config_from="'$UCX_INFO -b'"
        LD_LIBRARY_PATH=$UCX_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} $UCX_INFO -b > ucx-private/ucx_info_b.txt 2>/dev/null ||
            AC_MSG_ERROR([ucx_info -b failed])
        XQP_UCX_BUILD_CONFIG_SUMMARY="ucx_info -b"
    ])
    AS_IF([$GREP -q '^#define ENABLE_MT' ucx-private/ucx_info_b.txt], [],
          [AC_MSG_ERROR([$xqp_build_config_from printed no build configuration])])
    {
        echo "/* Generated by configure from $xqp_build_config_from (UCX $XQP_UCX_VERSION). Do not edit. */"
        echo "#ifndef XQP_UCX_BUILD_CONFIG_H"
        echo "#define XQP_UCX_BUILD_CONFIG_H"
        $GREP '^#define ' ucx-private/ucx_info_b.txt |
            $GREP -v -E '^#define +(PACKAGE|PACKAGE_@<:@A-Z_@:>@*|VERSION|LT_OBJDIR|STDC_HEADERS|UCX_CONFIG_H)( |$)'
        echo "#endif"
    } > ucx-private/ucx_build_config.h
    rm -f ucx-private/ucx_info_b.txt
    AC_MSG_RESULT([ucx-private/ucx_build_config.h])

    UCX_INTERNAL_CPPFLAGS="-I\$(top_builddir)/ucx-private -isystem $with_ucx_src/src"
    AC_SUBST([UCX_INTERNAL_CPPFLAGS])
    AC_SUBST([with_ucx_src])
    AC_SUBST([XQP_UCX_VERSION])
    AC_SUBST([XQP_UCX_MAJOR], [$xqp_ucx_major])
    AC_SUBST([XQP_UCX_MINOR], [$xqp_ucx_minor])
    AC_SUBST([XQP_UCX_PATCH], [$xqp_ucx_patch])
    AC_SUBST([XQP_MODULEDIR], [$with_ucx_moduledir])
    AM_CONDITIONAL([XQP_UCX_COMPILE_ONLY], [test "$enable_ucx_compile_only" = yes])
    XQP_MODULEDIR_SUMMARY=$with_ucx_moduledir
])

# XQP_CHECK_GTEST: --with-gtest=yes|no|DIR (default: use it when found).
AC_DEFUN([XQP_CHECK_GTEST], [
    AC_ARG_WITH([gtest],
        [AS_HELP_STRING([--with-gtest=yes|no|DIR], [GoogleTest for 'make check' (default: when found)])],
        [], [with_gtest=check])
    GTEST_CPPFLAGS=
    GTEST_LIBS=
    xqp_have_gtest=no
    AS_CASE(["$with_gtest"],
        [no], [],
        [yes|check], [
            PKG_CHECK_MODULES([GTEST], [gtest_main gtest],
                [GTEST_CPPFLAGS=$GTEST_CFLAGS; xqp_have_gtest=yes],
                [GTEST_LIBS="-lgtest_main -lgtest -pthread"; xqp_have_gtest=probe])],
        [AS_IF([test -d "$with_gtest"], [],
               [AC_MSG_ERROR([--with-gtest=$with_gtest: no such directory])])
         GTEST_CPPFLAGS="-I$with_gtest/include"
         GTEST_LIBS="-L$with_gtest/lib -Wl,-rpath,$with_gtest/lib -lgtest_main -lgtest -pthread"
         xqp_have_gtest=probe])
    AS_IF([test "$xqp_have_gtest" != no], [
        AC_MSG_CHECKING([whether GoogleTest links])
        xqp_save_CPPFLAGS=$CPPFLAGS
        xqp_save_LIBS=$LIBS
        xqp_save_CXXFLAGS=$CXXFLAGS
        CPPFLAGS="$CPPFLAGS $GTEST_CPPFLAGS"
        CXXFLAGS="$CXXFLAGS $XQP_CXXSTD"
        LIBS="$GTEST_LIBS $LIBS"
        AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <gtest/gtest.h>]],
                                        [[EXPECT_EQ(1, 1);]])],
            [AC_MSG_RESULT([yes]); xqp_have_gtest=yes],
            [AC_MSG_RESULT([no]); xqp_have_gtest=no])
        CPPFLAGS=$xqp_save_CPPFLAGS
        LIBS=$xqp_save_LIBS
        CXXFLAGS=$xqp_save_CXXFLAGS])
    AS_IF([test "$xqp_have_gtest" = no && test "$with_gtest" != no && test "$with_gtest" != check],
          [AC_MSG_ERROR([--with-gtest=$with_gtest: GoogleTest not found or does not link (Debian: libgtest-dev)])])
    AM_CONDITIONAL([HAVE_GTEST], [test "$xqp_have_gtest" = yes])
    xqp_gtest_summary=$xqp_have_gtest
    AS_IF([test "$xqp_have_gtest" = no], [xqp_gtest_summary="no (make check skips the unit tests)"])
    AC_SUBST([GTEST_CPPFLAGS])
    AC_SUBST([GTEST_LIBS])
])

# XQP_CHECK_FLAG(lang-var, flag): append flag to lang-var when the compiler takes it.
AC_DEFUN([XQP_CHECK_FLAG], [
    AC_MSG_CHECKING([whether the compiler accepts $2])
    xqp_save_flags=$[]_AC_LANG_PREFIX[]FLAGS
    _AC_LANG_PREFIX[]FLAGS="$[]_AC_LANG_PREFIX[]FLAGS -Werror $2"
    AC_COMPILE_IFELSE([AC_LANG_PROGRAM([], [])],
        [AC_MSG_RESULT([yes]); $1="$$1 $2"],
        [AC_MSG_RESULT([no])])
    _AC_LANG_PREFIX[]FLAGS=$xqp_save_flags
])

# XQP_CHECK_FLAGS: strict warnings, hidden visibility.
AC_DEFUN([XQP_CHECK_FLAGS], [
    AC_ARG_ENABLE([werror],
        [AS_HELP_STRING([--disable-werror], [do not turn warnings into errors])],
        [], [enable_werror=yes])
    XQP_CXXFLAGS=$XQP_CXXSTD
    for xqp_flag in -Wall -Wextra -Wshadow -Wformat=2 -Wnon-virtual-dtor -Wundef \
                    -fvisibility=hidden -fvisibility-inlines-hidden; do
        XQP_CHECK_FLAG([XQP_CXXFLAGS], [$xqp_flag])
    done
    AC_LANG_PUSH([C])
    XQP_CFLAGS=
    for xqp_flag in -Wall -Wextra -Wshadow -Wformat=2 -Wundef -Wstrict-prototypes \
                    -Werror=incompatible-pointer-types -Werror=implicit-function-declaration \
                    -fvisibility=hidden; do
        XQP_CHECK_FLAG([XQP_CFLAGS], [$xqp_flag])
    done
    AC_LANG_POP([C])
    AS_IF([test "$enable_werror" = yes],
          [XQP_CXXFLAGS="$XQP_CXXFLAGS -Werror"; XQP_CFLAGS="$XQP_CFLAGS -Werror"])

    AC_ARG_ENABLE([sanitizers],
        [AS_HELP_STRING([--enable-sanitizers@<:@=address|thread@:>@],
                        [build with AddressSanitizer and UndefinedBehaviorSanitizer
                         (yes, address) or with ThreadSanitizer (thread)])],
        [], [enable_sanitizers=no])
    XQP_NO_UNDEFINED="-no-undefined -Wl,--no-undefined"
    XQP_TESTS_ENV=
    AS_CASE([$enable_sanitizers],
      [yes|address], [
        xqp_san="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
        dnl GCC's flow analysis reports false positives under ASan (libstdc++'s regex)
        XQP_CXXFLAGS="$XQP_CXXFLAGS $xqp_san -Wno-maybe-uninitialized"
        XQP_CFLAGS="$XQP_CFLAGS $xqp_san"
        XQP_LDFLAGS="-fsanitize=address,undefined"
        dnl the sanitizer runtime is resolved when the program loads the plugin
        XQP_NO_UNDEFINED=
        dnl hwloc's plugins (libxml2, pci) are dlclose()d before LeakSanitizer
        dnl reports, which hides their process-lifetime allocations from the
        dnl suppressions: the sanitized unit tests run hwloc without them
        XQP_TESTS_ENV="HWLOC_LIBXML=0 HWLOC_PLUGINS_PATH=/nonexistent LSAN_OPTIONS=suppressions=\$(abs_top_srcdir)/test/lsan.supp ASAN_OPTIONS=fast_unwind_on_malloc=0 UBSAN_OPTIONS=print_stacktrace=1"],
      [thread], [
        xqp_san="-fsanitize=thread -fno-omit-frame-pointer"
        XQP_CXXFLAGS="$XQP_CXXFLAGS $xqp_san"
        XQP_CFLAGS="$XQP_CFLAGS $xqp_san"
        XQP_LDFLAGS="-fsanitize=thread"
        XQP_NO_UNDEFINED=
        dnl reports inside UCX and rdma-core (not instrumented) are suppressed
        dnl there, each with its reason; none of xqp's own code
        XQP_TESTS_ENV="TSAN_OPTIONS='suppressions=\$(abs_top_srcdir)/test/tsan.supp halt_on_error=1 second_deadlock_stack=1'"],
      [no], [],
      [AC_MSG_ERROR([--enable-sanitizers=$enable_sanitizers: use yes, address or thread])])
    AC_SUBST([XQP_TESTS_ENV])
    AC_SUBST([XQP_LDFLAGS])
    AC_SUBST([XQP_NO_UNDEFINED])
    AC_SUBST([XQP_CXXFLAGS])
    AC_SUBST([XQP_CFLAGS])
])
