// SPDX-License-Identifier: GPL-2.0
/*
 * Exports as capabilities (issue 42, build 8; export_fd.rs): EXPORT_MEMORY with
 * DAVINCI_EXPORT_FLAG_FD returns a file descriptor of an anonymous-inode file that names the
 * export (which device, its token), and IMPORT_MEMORY with DAVINCI_IMPORT_FLAG_FD takes such
 * a descriptor instead of a token: passed over SCM_RIGHTS or inherited, the fd is the right
 * to import, and no other process can guess or read it (the token stays in the kernel: no
 * fdinfo shows it). The file holds no reference to the device: it is a name, checked against
 * the device and its grant at import; the export itself lives with its allocation, and an
 * fd of a freed export imports nothing (ENOENT), as a stale token does.
 */

#include <linux/anon_inodes.h>
#include <linux/err.h>
#include <linux/fcntl.h>
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/module.h>
#include <linux/slab.h>

struct davinci_export_name {
	u64 instance;
	u64 token;
};

static int davinci_export_release(struct inode *inode, struct file *file)
{
	kfree(file->private_data);
	return 0;
}

static const struct file_operations davinci_export_fops = {
	.owner = THIS_MODULE,
	.release = davinci_export_release,
};

int davinci_export_fd_prepare(u64 instance, u64 token, struct file **out);
void davinci_export_fd_commit(int fd, struct file *file);
void davinci_export_fd_abort(int fd, struct file *file);
int davinci_export_fd_name(unsigned int fd, u64 *instance, u64 *token);

/*
 * Reserves a descriptor (close-on-exec) and makes the file naming (instance, token): the
 * descriptor, or a negative errno. Nothing is visible to the process until
 * davinci_export_fd_commit (after the reply reached it); davinci_export_fd_abort undoes it.
 */
int davinci_export_fd_prepare(u64 instance, u64 token, struct file **out)
{
	struct davinci_export_name *name;
	struct file *file;
	int fd;

	name = kzalloc(sizeof(*name), GFP_KERNEL_ACCOUNT);
	if (!name)
		return -ENOMEM;
	name->instance = instance;
	name->token = token;
	fd = get_unused_fd_flags(O_CLOEXEC);
	if (fd < 0) {
		kfree(name);
		return fd;
	}
	file = anon_inode_getfile("[davinci-export]", &davinci_export_fops, name, O_RDONLY);
	if (IS_ERR(file)) {
		put_unused_fd(fd);
		kfree(name);
		return PTR_ERR(file);
	}
	*out = file;
	return fd;
}

void davinci_export_fd_commit(int fd, struct file *file)
{
	fd_install(fd, file);
}

void davinci_export_fd_abort(int fd, struct file *file)
{
	/* The file's release frees its name. */
	fput(file);
	put_unused_fd(fd);
}

/*
 * What the caller's descriptor `fd` names: 0, -EBADF (no such open descriptor) or -EINVAL
 * (a descriptor, but not an export's).
 */
int davinci_export_fd_name(unsigned int fd, u64 *instance, u64 *token)
{
	struct file *file = fget(fd);
	const struct davinci_export_name *name;

	if (!file)
		return -EBADF;
	if (file->f_op != &davinci_export_fops) {
		fput(file);
		return -EINVAL;
	}
	name = file->private_data;
	*instance = name->instance;
	*token = name->token;
	fput(file);
	return 0;
}
