"""The one place where Python meets the C ABI of libembtier.

Nothing here is written by hand from include/embtier.h: at import the
header itself is parsed, and every enum constant, integer #define and
struct layout the bindings use comes from it.  So when a field is added to
struct et_stats or the ET_ error codes are renumbered, the bindings follow
on the next import; only a new function needs a line in FUNCTIONS below.

Beside the library, `make python` builds _tables.c's table-batched calls
(libembtier_tables.so) and _fast.c's extension module (_embtier_fast.so),
which the module's [T, B] step calls go through; without them (or with
$EMBTIER_NO_TABLES or $EMBTIER_NO_FAST set) the same calls are made with
ctypes.

The header is looked for, in order, at $EMBTIER_HEADER, in the repository
(python/embtier/../../include), and beside the library (LIBDIR/../include);
the library at $EMBTIER_LIB, in the repository's build-python/ (`make
python` builds it there with libc malloc: Debian's jemalloc cannot be
loaded by dlopen), and then where the dynamic linker looks.  The header's version
must match the library's et_version().

A package installed with pip (python/setup.py) has an _install module
instead, written at build time: it loads the library from _install.LIBDIR
(PREFIX/lib/embtier/, where `make install` puts the libc-malloc build),
reads _install.INCDIR/embtier.h, and finds _tables.c and _fast.c built as
its own extension modules (_embtier_tables, _embtier_fast); $EMBTIER_LIB
and $EMBTIER_HEADER still come first.

Struct buffers handed to the library are padded with zeros (PAD bytes):
a library built from a newer header with more configuration fields reads
zeros there, which by the header's convention mean "the default", and one
with a larger struct et_stats writes into the padding instead of past the
buffer.  Store.open compares the size et_get_stats really writes with the
parsed one and refuses to go on if they differ.
"""

import ctypes
import ctypes.util
import os
import re

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(os.path.dirname(_HERE))

try:  # only in an installed package: written by python/setup.py
    from . import _install
except ImportError:
    _install = None

# Bytes of zeros after every struct passed to or filled by the library.
PAD = 512

# ------------------------------------------------------------ the header

_C_TYPES = {
    "uint64_t": ctypes.c_uint64,
    "int64_t": ctypes.c_int64,
    "uint32_t": ctypes.c_uint32,
    "int32_t": ctypes.c_int32,
    "uint16_t": ctypes.c_uint16,
    "uint8_t": ctypes.c_uint8,
    "int16_t": ctypes.c_int16,
    "int8_t": ctypes.c_int8,
    "char": ctypes.c_char,
    "int": ctypes.c_int,
    "unsigned": ctypes.c_uint,
    "unsigned int": ctypes.c_uint,
    "long": ctypes.c_long,
    "unsigned long": ctypes.c_ulong,
    "float": ctypes.c_float,
    "double": ctypes.c_double,
    "size_t": ctypes.c_size_t,
    "bool": ctypes.c_bool,
}


def _strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def _int_expr(expr, known):
    """Value of a constant integer expression: literals with C suffixes,
    names defined earlier, parentheses, + - * << >> | & ~."""
    expr = re.sub(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]+\b", r"\1", expr.strip())
    names = re.findall(r"\b[A-Za-z_]\w*", expr)  # not the x of 0x1
    if any(n not in known for n in names):
        return None
    if not re.fullmatch(r"[\w\s()+\-*/<>|&~]*", expr) or "//" in expr:
        return None
    expr = expr.replace("/", "//")
    try:
        return int(eval(expr, {"__builtins__": {}}, dict(known)))
    except Exception:
        return None


class Header:
    """Enum constants, integer #defines and struct fields of embtier.h."""

    def __init__(self, path):
        self.path = path
        with open(path, encoding="utf-8") as f:
            raw = f.read()
        self.version_string = None
        m = re.search(r'#define\s+ET_VERSION_STRING\s+"([^"]*)"', raw)
        if m:
            self.version_string = m.group(1)
        text = _strip_comments(raw)
        self.consts = {}
        self.enums = {}  # enum type name (or None) -> {name: value}
        for m in re.finditer(r"^\s*#define\s+(\w+)\s+(.+)$", text, re.M):
            v = _int_expr(m.group(2), self.consts)
            if v is not None:
                self.consts[m.group(1)] = v
        body = re.sub(r"^\s*#.*$", "", text, flags=re.M)
        for m in re.finditer(r"enum\s*(\w*)\s*\{(.*?)\}", body, re.S):
            vals, nxt = {}, 0
            for item in m.group(2).split(","):
                item = item.strip()
                if not item:
                    continue
                name, _, expr = item.partition("=")
                name = name.strip()
                if expr:
                    nxt = _int_expr(expr, {**self.consts, **vals})
                    if nxt is None:
                        raise ImportError(
                            f"{path}: cannot evaluate {item!r}")
                vals[name] = nxt
                nxt += 1
            self.enums[m.group(1) or None] = vals
            self.consts.update(vals)
        self.enum_types = {n for n in self.enums if n}
        self.enum_types |= set(re.findall(r"typedef\s+enum\s+\w*\s*\{.*?\}\s*(\w+)\s*;", body, re.S))
        self.pointer_types = set(re.findall(
            r"typedef[^;{}]*\(\s*\*\s*(\w+)\s*\)", body))
        # name -> [(field, base type, is pointer, array length or None)]
        self.structs = {}
        self.bad = {}  # struct -> why it cannot be mirrored
        for m in re.finditer(r"struct\s+(\w+)\s*\{(.*?)\}\s*;", body, re.S):
            try:
                self.structs[m.group(1)] = self._fields(m.group(2))
            except ValueError as e:
                self.bad[m.group(1)] = str(e)

    def _fields(self, block):
        if "{" in block:
            raise ValueError("nested braces")
        fields = []
        for decl in block.split(";"):
            decl = " ".join(decl.split())
            if not decl:
                continue
            fp = re.match(r".*\(\s*\*\s*(\w+)\s*\)\s*\(.*\)$", decl)
            if fp:  # a function pointer
                fields.append((fp.group(1), "void", True, None))
                continue
            m = re.match(r"(?:const\s+)?(struct\s+\w+|unsigned\s+\w+|\w+)"
                         r"\s+(.*)$", decl)
            if not m:
                raise ValueError(f"cannot parse {decl!r}")
            base, names = " ".join(m.group(1).split()), m.group(2)
            for name in names.split(","):
                name = name.strip()
                ptr = name.startswith("*")
                name = name.lstrip("* ").strip()
                n = None
                arr = re.match(r"(\w+)\s*\[(.*)\]$", name)
                if arr:
                    name = arr.group(1)
                    n = _int_expr(arr.group(2), self.consts)
                    if n is None:
                        raise ValueError(f"array size {arr.group(2)!r}")
                fields.append((name, base, ptr, n))
        return fields

    def field_enum(self, struct, field):
        """The enum type of struct.field, or None."""
        for f, base, ptr, _ in self.structs.get(struct, ()):
            if f == field and not ptr and base in self.enum_types:
                return base
        return None

    def enum_values(self, enum):
        """{member name: value} of a named enum."""
        return self.enums.get(enum, {})

    def ctype(self, base, ptr, n, built):
        if ptr or base in self.pointer_types:
            t = ctypes.c_void_p
        elif base.startswith("struct "):
            t = built.get(base.split()[1])
            if t is None:
                raise ValueError(f"{base} not mirrored")
        elif base in _C_TYPES:
            t = _C_TYPES[base]
        elif base in self.enum_types:
            t = ctypes.c_int  # every et_ enum fits an int
        else:
            raise ValueError(f"unknown field type {base}")
        return t * n if n is not None else t

    def build_structs(self):
        """ctypes classes of every struct that can be mirrored; the others
        are in self.bad, and fail only when used."""
        built = {}
        for name, fields in self.structs.items():
            try:
                ff = [(f, self.ctype(b, p, n, built))
                      for f, b, p, n in fields]
            except ValueError as e:
                self.bad[name] = str(e)
                continue
            built[name] = type(name, (ctypes.Structure,), {"_fields_": ff})
        return built


def _find_header(libpath):
    cands = [os.environ.get("EMBTIER_HEADER"),
             os.path.join(_install.INCDIR, "embtier.h") if _install else
             os.path.join(_REPO, "include", "embtier.h")]
    if libpath:
        libdir = os.path.dirname(os.path.realpath(libpath))
        cands.append(os.path.join(libdir, "..", "include", "embtier.h"))
    cands += ["/usr/local/include/embtier.h", "/usr/include/embtier.h"]
    for c in cands:
        if c and os.path.isfile(c):
            return c
    raise ImportError("embtier: include/embtier.h not found (set "
                      "EMBTIER_HEADER to its path)")


def _find_library():
    env = os.environ.get("EMBTIER_LIB")
    if env:
        if not os.path.exists(env):
            raise ImportError(f"embtier: EMBTIER_LIB={env} does not exist")
        return env
    if _install:  # where `make install` put the libc-malloc build
        path = os.path.join(_install.LIBDIR, "libembtier.so")
        if not os.path.exists(path):
            raise ImportError(f"embtier: {path} not found (this package was "
                              "built for it: run `make install` again, or "
                              "set EMBTIER_LIB to a libembtier.so built "
                              "without jemalloc)")
        return path
    # `make python` builds it there, without jemalloc: the jemalloc of
    # Debian 12 uses initial-exec TLS and cannot be dlopen()ed.
    local = os.path.join(_REPO, "build-python", "libembtier.so")
    if os.path.exists(local):
        return local
    found = ctypes.util.find_library("embtier")
    if found:
        return found
    raise ImportError("embtier: libembtier.so not found: run `make python` "
                      "in the repository, or set EMBTIER_LIB to its path")


# ------------------------------------------------------------ the library

# name: (restype, argtypes); pointers as c_void_p so that callers pass the
# integer address of a numpy array or torch tensor without a conversion.
_P = ctypes.c_void_p
_I = ctypes.c_int
_Z = ctypes.c_size_t
FUNCTIONS = {
    "et_version": (_I, [_P]),
    "et_strerror": (ctypes.c_char_p, [_I]),
    "et_errdetail": (ctypes.c_char_p, []),
    "et_store_open": (_I, [ctypes.c_char_p, _P, _P]),
    "et_direct_bytes": (_I, [_P, _P, _Z, _I, _P]),
    "et_store_close": (_I, [_P]),
    "et_table_create": (_I, [_P, ctypes.c_char_p, _P, _P]),
    "et_table_open": (_I, [_P, ctypes.c_char_p, _P, _P]),
    "et_table_info": (_I, [_P, _I, _P]),
    "et_gather": (_I, [_P, _I, _P, _Z, _P]),
    "et_gather_pooled": (_I, [_P, _I, _P, _P, _Z, _I, _P]),
    "et_update": (_I, [_P, _I, _P, _Z, _P, _P]),
    "et_update_pooled": (_I, [_P, _I, _P, _P, _Z, _I, _P, _P]),
    "et_write_rows": (_I, [_P, _I, _P, _Z, _P]),
    "et_write_rows_state": (_I, [_P, _I, _P, _Z, _P, _P]),
    "et_checkpoint_read_dir": (_I, [ctypes.c_char_p, _P, _P, _P]),
    "et_tfile_open": (_I, [ctypes.c_char_p, ctypes.c_uint, _P]),
    "et_tfile_info": (_I, [_P, _P]),
    "et_tfile_rows": (_I, [_P, ctypes.c_uint64, _P, _Z, _P]),
    "et_tfile_read_rows": (_I, [_P, _P, _Z, _P, _P]),
    "et_tfile_close": (None, [_P]),
    "et_flush": (_I, [_P]),
    "et_checkpoint": (_I, [_P, _P, _Z]),
    "et_checkpoint_read": (_I, [_P, _P, _P, _P]),
    "et_prefetch": (_I, [_P, _P, _Z]),
    "et_lookahead": (_I, [_P, _P, _Z]),
    "et_get_stats": (_I, [_P, _I, _P]),
    "et_erase": (_I, [_P, _I, _P, _Z, _P]),
    "et_key_policy_set": (_I, [_P, _I, _P]),
    "et_delta_export": (_I, [ctypes.c_char_p, ctypes.c_uint64,
                             ctypes.c_char_p, ctypes.c_uint, _P]),
    "et_delta_apply": (_I, [ctypes.c_char_p, ctypes.c_char_p, _P]),
    "et_serve_open": (_I, [ctypes.c_char_p, _P, _P]),
    "et_serve_table": (_I, [_P, ctypes.c_char_p, _P, _P]),
    "et_serve_lookup": (_I, [_P, _I, _P, _Z, _P, _P]),
    "et_serve_dense": (_I, [_P, _P, _Z, _P, _P]),
    "et_serve_apply": (_I, [_P, ctypes.c_char_p, _P]),
    "et_serve_info": (_I, [_P, _P]),
    "et_serve_close": (None, [_P]),
}

LIB_PATH = _find_library()
try:
    lib = ctypes.CDLL(LIB_PATH)
except OSError as e:
    hint = ""
    if "static TLS" in str(e):
        hint = (" (a build linked with jemalloc cannot be dlopen()ed: "
                "use the one `make python` puts in build-python/)")
    raise ImportError(f"embtier: cannot load {LIB_PATH}: {e}{hint}") from e
for _name, (_res, _args) in FUNCTIONS.items():
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args


def _extension(name):
    """The path of this package's extension module `name` (an installed
    package's), or None."""
    import importlib.machinery
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(_HERE, name + suffix)
        if os.path.exists(path):
            return path
    return None


def _load_tables():
    """build-python/python/libembtier_tables.so (_tables.c; an installed
    package's _embtier_tables extension), or None: the package then makes
    the per-table calls itself."""
    if os.environ.get("EMBTIER_NO_TABLES"):
        return None
    if _install:
        path = _extension("_embtier_tables")
        if path is None:
            return None
    else:
        for d in (os.path.dirname(os.path.realpath(LIB_PATH)),
                  os.path.join(_REPO, "build-python")):
            path = os.path.join(d, "python", "libembtier_tables.so")
            if os.path.exists(path):
                break
        else:
            return None
    t = ctypes.CDLL(path)
    common = [_P, _Z, _P, _P, _P, _P, _Z, _P, _P, _Z, _I]
    t.etpy_gather_pooled.argtypes = common + [_P, _P]
    t.etpy_update_pooled.argtypes = common + [_P, _P, _P]
    t.etpy_prefetch.argtypes = [_P, _Z, _P, _P, _Z]
    t.etpy_plan_prefetch.argtypes = [_P, _P, _P, _Z]
    t.etpy_plan_gather.argtypes = [_P, _P, _P, _Z, _P, _P, _P]
    t.etpy_plan_update.argtypes = [_P, _P, _P, _Z, _P, ctypes.c_float,
                                   ctypes.c_float, _P]
    for f in (t.etpy_gather_pooled, t.etpy_update_pooled, t.etpy_prefetch,
              t.etpy_plan_prefetch, t.etpy_plan_gather, t.etpy_plan_update):
        f.restype = _I
    t.etpy_plan_new.argtypes = [_Z, _P, _P, _I]
    t.etpy_plan_new.restype = _P
    t.etpy_plan_free.argtypes = [_P]
    t.etpy_plan_free.restype = None
    return t


tables_lib = _load_tables()


def _load_fast():
    """build-python/python/_embtier_fast.so (_fast.c; an installed
    package's _embtier_fast extension), or None."""
    if tables_lib is None or os.environ.get("EMBTIER_NO_FAST"):
        return None
    import importlib.util
    if _install:
        path = _extension("_embtier_fast")
    else:
        path = os.path.join(os.path.dirname(tables_lib._name),
                            "_embtier_fast.so")
    if path is None or not os.path.exists(path):
        return None
    spec = importlib.util.spec_from_file_location("_embtier_fast", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def bind_plan(prefetch, gather, update):
    """Makes plan_prefetch, plan_gather and plan_update (what the module's
    step calls) these three ctypes functions of _tables.c's plan calls'
    signatures: through _fast.c's module if it is built, else directly."""
    global plan_prefetch, plan_gather, plan_update
    if fast is not None:
        fast.bind(*(ctypes.cast(f, ctypes.c_void_p).value
                    for f in (prefetch, gather, update)))
        plan_prefetch, plan_gather, plan_update = \
            fast.prefetch, fast.gather, fast.update
    else:
        plan_prefetch, plan_gather, plan_update = prefetch, gather, update


fast = _load_fast()
plan_prefetch = plan_gather = plan_update = None
if tables_lib is not None:
    bind_plan(tables_lib.etpy_plan_prefetch, tables_lib.etpy_plan_gather,
              tables_lib.etpy_plan_update)

HEADER = Header(_find_header(LIB_PATH))
STRUCTS = HEADER.build_structs()
CONSTS = HEADER.consts

_libc = ctypes.CDLL(None)
libc_free = _libc.free
libc_free.argtypes = [_P]
libc_free.restype = None

_vs = ctypes.c_char_p()
lib.et_version(ctypes.byref(_vs))
LIB_VERSION = _vs.value.decode()
if HEADER.version_string and HEADER.version_string != LIB_VERSION:
    raise ImportError(f"embtier: {HEADER.path} is version "
                      f"{HEADER.version_string} but {LIB_PATH} is "
                      f"{LIB_VERSION}")


def struct_class(name):
    cls = STRUCTS.get(name)
    if cls is None:
        raise ImportError(f"embtier: struct {name} of {HEADER.path} cannot "
                          f"be mirrored: {HEADER.bad.get(name, 'not found')}")
    return cls


def new(name, **fields):
    """A zero-padded instance of struct `name`, fields set from kwargs
    (unknown names are a TypeError: a typo must not pass silently)."""
    cls = struct_class(name)
    buf = (ctypes.c_char * (ctypes.sizeof(cls) + PAD))()
    st = cls.from_buffer(buf)  # keeps buf alive
    names = {f[0] for f in cls._fields_}
    for k, v in fields.items():
        if k not in names:
            raise TypeError(f"struct {name} has no field {k!r} (fields: "
                            f"{', '.join(sorted(names))})")
        setattr(st, k, v)
    return st


def numpy_dtype(name):
    """A numpy structured dtype laid out as struct `name` (scalar fields
    only), to fill arrays of it without a Python loop."""
    import numpy as np
    cls = struct_class(name)
    names, formats, offsets = [], [], []
    for f, t in cls._fields_:
        if issubclass(t, ctypes.Structure):
            raise TypeError(f"struct {name}: nested struct {f}")
        names.append(f)
        formats.append(np.dtype(np.uintp) if t is ctypes.c_void_p
                       else np.dtype(t))
        offsets.append(getattr(cls, f).offset)
    return np.dtype({"names": names, "formats": formats,
                     "offsets": offsets, "itemsize": ctypes.sizeof(cls)})


def to_dict(st):
    """A struct (nested structs too) as a dict of its fields."""
    out = {}
    for f, t in type(st)._fields_:
        v = getattr(st, f)
        out[f] = to_dict(v) if isinstance(v, ctypes.Structure) else v
    return out
