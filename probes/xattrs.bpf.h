/* ==== xattrs: what each file's extended attributes would take inside its inode ========
 * (XATTR_FILES) A setxattr, lsetxattr or fsetxattr that succeeded on a traced filesystem
 * notes its attribute under its file in xattr_files: the name's hash and the bytes its
 * entry takes in an inode's attribute space (ext4's EXT4_XATTR_LEN(name) +
 * EXT4_XATTR_SIZE(value): a 16-byte ext4_xattr_entry, the name without its prefix and the
 * value as ext4 stores it, each rounded up to 4 bytes). The recorder sums each file's
 * entries at the end (ProbeSet.read_xattr_files): whether they fit a 256- or 512-byte
 * inode. The file is the inode's address for a descriptor's call, else a hash of the path
 * as the caller gave it.
 * An LRU map: past XATTR_FILES_MAX files the least recent go, and the sample is the last ones.
 * Included by recorder.bpf.c after common.bpf.h and before calls.bpf.h, whose call_end
 * calls xattr_note.
 */
#define XATTR_SLOTS 4
#define XATTR_PATH_BYTES 128
#define XATTR_NAME_BYTES 64

struct xattr_file_key {
	__u32 dev;
	__u32 pad;
	__u64 file;
};

struct xattr_file_val {
	__u32 name_hash[XATTR_SLOTS];
	__u16 entry_bytes[XATTR_SLOTS];   /* 0: a free slot */
	__u32 more_bytes;                 /* the entries of names past XATTR_SLOTS, summed */
};

struct xattr_scratch {
	char path[XATTR_PATH_BYTES];
	char name[XATTR_NAME_BYTES];
};

BPF_TABLE("lru_hash", struct xattr_file_key, struct xattr_file_val, xattr_files, XATTR_FILES_MAX);
BPF_PERCPU_ARRAY(xattr_buf, struct xattr_scratch, 1);

/* FNV-1a over a NUL-terminated string of at most n bytes */
#define XATTR_HASH(h, s, n)                         \
	_Pragma("unroll")                           \
	for (int i = 0; i < (n); i++) {             \
		if (!(s)[i])                        \
			break;                      \
		h = (h ^ (__u8)(s)[i]) * 16777619u; \
	}

/* system.posix_acl_access or _default: a POSIX ACL, stored under an index with no name */
static __always_inline int xattr_is_posix_acl(const char *name)
{
	return name[0] == 's' && name[1] == 'y' && name[7] == 'p';
}

/* The attribute name `name` (len bytes with its NUL) without the prefix ext4 keeps as an
 * index (ext4_xattr_handler_map): its length in the entry. */
static __always_inline __u32 xattr_stored_name_len(const char *name, int len)
{
	__u32 n = len > 0 ? len - 1 : 0;
	if (name[0] == 'u')
		return n > 5 ? n - 5 : 0;          /* user. */
	if (name[0] == 't')
		return n > 8 ? n - 8 : 0;          /* trusted. */
	if (name[0] == 's' && name[1] == 'e')
		return n > 9 ? n - 9 : 0;          /* security. */
	if (xattr_is_posix_acl(name))
		return 0;
	return n > 7 ? n - 7 : 0;                  /* system.data, ... */
}

/* The call c (a set of an attribute, flags & NR_XATTR_SET) succeeded on dev: note its
 * attribute under its file. name, size, file: its arguments (the name, the value's size,
 * the path or the descriptor). */
static __always_inline void xattr_note(struct inflight *c, __u32 dev, __u64 file, __u64 name, __u64 size)
{
	__u32 zero = 0;
	struct xattr_scratch *s = xattr_buf.lookup(&zero);
	if (!s)
		return;
	struct xattr_file_key k = {.dev = dev};
	if (c->flags & NR_FD_ARG0) {
		k.file = READ_FIELD(fd_file(file), FILE_INODE);
	} else {
		if (bpf_probe_read_user_str(s->path, sizeof(s->path), (const void *)file) <= 0)
			return;
		__u32 h = 2166136261u;
		XATTR_HASH(h, s->path, XATTR_PATH_BYTES);
		k.file = h;
	}
	if (!k.file)
		return;
	int len = bpf_probe_read_user_str(s->name, sizeof(s->name), (const void *)name);
	if (len <= 0)
		return;
	__u32 nh = 2166136261u;
	XATTR_HASH(nh, s->name, XATTR_NAME_BYTES);
	if (xattr_is_posix_acl(s->name) && size >= 4) {
		/* a POSIX ACL: ext4 stores its entries shorter than the call passes them (8 bytes
		 * each): ext4_acl_size(), 4 bytes of header, 4 for each of the first 4, 8 after */
		__u64 count = (size - 4) / 8;
		size = count <= 4 ? 4 + 4 * count : 8 * count - 12;
	}
	__u64 bytes = ((xattr_stored_name_len(s->name, len) + 16 + 3) & ~3) + ((size + 3) & ~3ULL);
	if (bytes > 0xffff)
		bytes = 0xffff;   /* a value no inode holds */
	struct xattr_file_val zv = {};
	struct xattr_file_val *v = xattr_files.lookup_or_try_init(&k, &zv);
	if (!v)
		return;
	int free_slot = -1;
#pragma unroll
	for (int i = 0; i < XATTR_SLOTS; i++) {
		if (v->entry_bytes[i] && v->name_hash[i] == nh) {
			v->entry_bytes[i] = bytes;   /* the attribute replaced: its latest size */
			return;
		}
		if (!v->entry_bytes[i] && free_slot < 0)
			free_slot = i;
	}
	if (free_slot >= 0 && free_slot < XATTR_SLOTS) {
		v->name_hash[free_slot & (XATTR_SLOTS - 1)] = nh;
		v->entry_bytes[free_slot & (XATTR_SLOTS - 1)] = bytes;
	} else {
		v->more_bytes += bytes;
	}
}
