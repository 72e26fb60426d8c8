package io.streamtable.hadoop;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;

import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsAction;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.io.nativeio.NativeIO;

/**
 * Hadoop's checksummed local file system ({@code file:}) whose permission changes do not start
 * a process.
 *
 * <p>Without Hadoop's native library (PySpark ships none), {@link RawLocalFileSystem} sets the
 * permission of every file it creates, and of every directory it makes with one, by running
 * {@code chmod} in a child process. Spark's checkpoint files (offset and commit logs, state
 * store changelogs, each with a {@code .crc} file) are created so: two processes per file,
 * about 20 ms per checkpoint file on a 2-core machine. This file system sets the same
 * permission bits through {@link Files#setPosixFilePermissions}, the same system call without
 * the process. Everything else is Hadoop's own code, and so are the cases Java would handle
 * differently: the sticky bit (which Java cannot set), a directory with its set-user-ID or
 * set-group-ID bit (which {@code chmod} keeps), and a file system without POSIX permissions.
 * One difference remains: a missing path raises {@link java.nio.file.NoSuchFileException}
 * where Hadoop's {@code chmod} raised its {@code ExitCodeException}; both are
 * {@link IOException}s.
 */
public class ForklessLocalFileSystem extends LocalFileSystem {

  public ForklessLocalFileSystem() {
    super(new Raw());
  }

  /** The raw file system under the checksums. */
  public static class Raw extends RawLocalFileSystem {

    @Override
    public void setPermission(Path p, FsPermission permission) throws IOException {
      if (NativeIO.isAvailable() || permission.getStickyBit()) {
        super.setPermission(p, permission);
        return;
      }
      java.nio.file.Path file = pathToFile(p).toPath();
      try {
        if (keepsSetIdBits(file)) {
          super.setPermission(p, permission);
          return;
        }
        Files.setPosixFilePermissions(file, bits(permission));
      } catch (UnsupportedOperationException | IllegalArgumentException e) {
        super.setPermission(p, permission);
      }
    }

    /**
     * Whether {@code chmod} would keep bits that {@link Files#setPosixFilePermissions} clears:
     * GNU {@code chmod} given Hadoop's four octal digits leaves a directory's set-user-ID and
     * set-group-ID bits as they are (a directory made under a set-group-ID one inherits it).
     */
    private static boolean keepsSetIdBits(java.nio.file.Path file) throws IOException {
      if (!Files.isDirectory(file)) {
        return false;
      }
      Object mode = Files.getAttribute(file, "unix:mode");
      return mode instanceof Integer && (((Integer) mode) & 06000) != 0;
    }
  }

  static Set<PosixFilePermission> bits(FsPermission permission) {
    Set<PosixFilePermission> bits = EnumSet.noneOf(PosixFilePermission.class);
    add(bits, permission.getUserAction(), PosixFilePermission.OWNER_READ,
        PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_EXECUTE);
    add(bits, permission.getGroupAction(), PosixFilePermission.GROUP_READ,
        PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_EXECUTE);
    add(bits, permission.getOtherAction(), PosixFilePermission.OTHERS_READ,
        PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_EXECUTE);
    return bits;
  }

  private static void add(Set<PosixFilePermission> bits, FsAction action,
      PosixFilePermission read, PosixFilePermission write, PosixFilePermission execute) {
    if (action.implies(FsAction.READ)) {
      bits.add(read);
    }
    if (action.implies(FsAction.WRITE)) {
      bits.add(write);
    }
    if (action.implies(FsAction.EXECUTE)) {
      bits.add(execute);
    }
  }
}
