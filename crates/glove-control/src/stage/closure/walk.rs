//! Walking a source tree into a listing: one component at a time beneath
//! a held root descriptor, never following a link, each entry checked
//! (kind, readability, link targets) and bounded (depth, path length,
//! entries, bytes).

use super::*;

impl Listing {
    pub(super) fn add_tree(&mut self, t: &Tree, walk: Walk) -> Result<(), Rejection> {
        let (Some(parent), Some(name)) = (t.src.parent(), t.src.file_name()) else {
            return Err(Rejection::new(
                STAGE_SOURCE_INVALID,
                format!("{} has no parent directory", t.src.display()),
            ));
        };
        let name = name.to_str().ok_or_else(|| {
            Rejection::new(
                STAGE_NAME_INVALID,
                format!("{} is not UTF-8", t.src.display()),
            )
        })?;
        // The parent is held only for the tree's own entry: a file tree
        // is reopened beneath it, a directory tree beneath itself.
        let pfd = rustix::fs::open(
            parent,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io("cannot open", parent, &e.into()))?;
        self.roots.push(pfd);
        let proot = self.roots.len() - 1;
        let dir = self.add(proot, None, name, &t.src, t.dest.clone(), walk)?;
        if let Some(fd) = dir {
            self.roots.push(fd);
            let root = self.roots.len() - 1;
            self.add_children(root, "", &t.src, &t.dest, t.skip_node_modules, walk)?;
        }
        Ok(())
    }

    /// Records `name` in the directory `rel` beneath `roots[root]` (`None`:
    /// the root itself), not followed, as `dest`; returns a directory's
    /// descriptor so the caller walks its children.
    pub(super) fn add(
        &mut self,
        root: usize,
        dir: Option<(&str, BorrowedFd<'_>)>,
        name: &str,
        shown: &Path,
        dest: String,
        walk: Walk,
    ) -> Result<Option<OwnedFd>, Rejection> {
        let (dir_rel, at) = match dir {
            Some((r, fd)) => (r, fd),
            None => ("", self.roots[root].as_fd()),
        };
        let st = rustix::fs::statat(at, name, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| io("cannot inspect", shown, &e.into()))?;
        let raw = st.st_mode & 0o7777;
        let ft = FileType::from_raw_mode(st.st_mode);
        let rel = if dir_rel.is_empty() {
            name.to_owned()
        } else {
            format!("{dir_rel}/{name}")
        };
        let mut opened = None;
        let (mode, kind) = match ft {
            FileType::Symlink => {
                let target = rustix::fs::readlinkat(at, name, Vec::new())
                    .map_err(|e| io("cannot read", shown, &e.into()))?;
                let target = PathBuf::from(
                    <std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(
                        target.into_bytes(),
                    ),
                );
                (
                    0,
                    Kind::Link {
                        target: check_link(&dest, &target)?,
                    },
                )
            }
            FileType::Directory => {
                if walk == Walk::Source {
                    check_readable(raw, true, shown)?;
                }
                let fd = open_dir_at(at, name).map_err(|e| opened_error(shown, e))?;
                let now =
                    rustix::fs::fstat(&fd).map_err(|e| io("cannot inspect", shown, &e.into()))?;
                if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) {
                    return Err(changed(shown, "was replaced"));
                }
                opened = Some(fd);
                (0o755, Kind::Dir)
            }
            FileType::RegularFile => {
                if walk == Walk::Source {
                    check_readable(raw, false, shown)?;
                }
                let id = Identity::of(&st);
                (
                    file_mode(raw),
                    Kind::File {
                        size: id.size,
                        sha256: [0; 32],
                        src: Origin {
                            root,
                            rel,
                            shown: shown.to_path_buf(),
                            id,
                        },
                    },
                )
            }
            _ => {
                return Err(Rejection::new(
                    STAGE_SPECIAL_FILE,
                    format!(
                        "{} is not a regular file, a directory or a link",
                        shown.display()
                    ),
                ))
            }
        };
        if walk == Walk::Store && ft != FileType::Symlink {
            let me = rustix::process::geteuid().as_raw();
            if raw != mode || st.st_uid != me {
                return Err(Rejection::new(
                    STAGE_STORE_MISMATCH,
                    format!(
                        "{} has mode {raw:o} and owner {} (want {mode:o} and {me})",
                        shown.display(),
                        st.st_uid
                    ),
                ));
            }
        }
        self.insert(dest, Entry { mode, kind })?;
        Ok(opened)
    }

    /// Walks the directory `rel` beneath `roots[root]` (the root itself
    /// when `rel` is empty), reopened beneath the root.
    pub(super) fn add_children(
        &mut self,
        root: usize,
        rel: &str,
        shown: &Path,
        dest: &str,
        skip_node_modules: bool,
        walk: Walk,
    ) -> Result<(), Rejection> {
        // The root is reopened as "." (a new open file description, so
        // listing it does not move the held descriptor's offset).
        let owned = if rel.is_empty() {
            open_dir_at(self.roots[root].as_fd(), ".")
        } else {
            open_beneath(
                self.roots[root].as_fd(),
                rel,
                OFlags::RDONLY | OFlags::DIRECTORY,
            )
        }
        .map_err(|e| opened_error(shown, e))?;
        let fd = owned.as_fd();
        let mut names = Vec::new();
        let listed =
            rustix::fs::Dir::read_from(fd).map_err(|e| io("cannot list", shown, &e.into()))?;
        for e in listed {
            let e = e.map_err(|e| io("cannot list", shown, &e.into()))?;
            let raw = e.file_name().to_bytes();
            if raw == b"." || raw == b".." {
                continue;
            }
            let name = std::str::from_utf8(raw)
                .ok()
                .filter(|n| !n.chars().any(char::is_control))
                .ok_or_else(|| {
                    Rejection::new(
                        STAGE_NAME_INVALID,
                        format!(
                            "{} holds a name that is not UTF-8 or has a control character",
                            shown.display()
                        ),
                    )
                })?
                .to_owned();
            if skip_node_modules && name == "node_modules" {
                continue;
            }
            names.push(name);
            if names.len() > MAX_CLOSURE_ENTRIES {
                return Err(Rejection::new(
                    STAGE_TOO_MANY_FILES,
                    format!(
                        "{} has more than {MAX_CLOSURE_ENTRIES} entries",
                        shown.display()
                    ),
                ));
            }
        }
        names.sort();
        for name in names {
            let child_shown = shown.join(&name);
            let d = if dest.is_empty() {
                name.clone()
            } else {
                format!("{dest}/{name}")
            };
            let child_rel = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            // The directory's descriptor is not kept across the recursion
            // (a deep tree would hold one per level); the child is reopened
            // beneath the root and checked to be the one listed.
            if self
                .add(root, Some((rel, fd)), &name, &child_shown, d.clone(), walk)?
                .is_some()
            {
                self.add_children(root, &child_rel, &child_shown, &d, false, walk)?;
            }
        }
        Ok(())
    }
}
