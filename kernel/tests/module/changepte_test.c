// SPDX-License-Identifier: GPL-2.0
/*
 * Test module for the change_pte patch: registers an mmu_notifier on the
 * mm of the process that writes "reg" to /sys/kernel/debug/changepte_test
 * and counts invalidate_range_start() calls with and without
 * MMU_NOTIFIER_RANGE_CHANGE_PTE and change_pte() calls.  Reading the file
 * returns "starts N flagged N change_pte N".
 *
 * Builds against patched and unpatched 6.1; on the unpatched kernel the
 * flag does not exist and "flagged" stays 0.
 */
#include <linux/module.h>
#include <linux/debugfs.h>
#include <linux/mmu_notifier.h>
#include <linux/sched/mm.h>
#include <linux/uaccess.h>

#ifndef MMU_NOTIFIER_RANGE_CHANGE_PTE
#define MMU_NOTIFIER_RANGE_CHANGE_PTE 0
#endif

static atomic64_t n_start, n_flagged, n_change;
static struct mmu_notifier ct_mn;
static struct mm_struct *ct_mm;
static DEFINE_MUTEX(ct_lock);
static struct dentry *ct_file;

static int
ct_start(struct mmu_notifier *mn, const struct mmu_notifier_range *r)
{
	atomic64_inc(&n_start);
	if (MMU_NOTIFIER_RANGE_CHANGE_PTE &&
	    (r->flags & MMU_NOTIFIER_RANGE_CHANGE_PTE))
		atomic64_inc(&n_flagged);
	return 0;
}

static void
ct_change_pte(struct mmu_notifier *mn, struct mm_struct *mm,
	      unsigned long address, pte_t pte)
{
	atomic64_inc(&n_change);
}

static const struct mmu_notifier_ops ct_ops = {
	.invalidate_range_start = ct_start,
	.change_pte = ct_change_pte,
};

static void
ct_unregister(void)
{
	if (ct_mm) {
		mmu_notifier_unregister(&ct_mn, ct_mm);
		ct_mm = NULL;
	}
}

static ssize_t
ct_write(struct file *f, const char __user *ubuf, size_t len, loff_t *ppos)
{
	char cmd[8] = "";
	int ret = 0;

	if (copy_from_user(cmd, ubuf, min(len, sizeof(cmd) - 1)))
		return -EFAULT;
	mutex_lock(&ct_lock);
	if (!strncmp(cmd, "reg", 3)) {
		ct_unregister();
		ct_mn.ops = &ct_ops;
		ret = mmu_notifier_register(&ct_mn, current->mm);
		if (!ret)
			ct_mm = current->mm;
	} else if (!strncmp(cmd, "unreg", 5)) {
		ct_unregister();
	}
	if (!ret) {
		atomic64_set(&n_start, 0);
		atomic64_set(&n_flagged, 0);
		atomic64_set(&n_change, 0);
	}
	mutex_unlock(&ct_lock);
	return ret ? ret : len;
}

static ssize_t
ct_read(struct file *f, char __user *ubuf, size_t len, loff_t *ppos)
{
	char buf[96];
	int n = scnprintf(buf, sizeof(buf),
			  "starts %lld flagged %lld change_pte %lld\n",
			  (long long)atomic64_read(&n_start),
			  (long long)atomic64_read(&n_flagged),
			  (long long)atomic64_read(&n_change));

	return simple_read_from_buffer(ubuf, len, ppos, buf, n);
}

static const struct file_operations ct_fops = {
	.owner = THIS_MODULE,
	.read = ct_read,
	.write = ct_write,
	.llseek = default_llseek,
};

static int __init
ct_init(void)
{
	ct_file = debugfs_create_file("changepte_test", 0600, NULL, NULL,
				      &ct_fops);
	return 0;
}

static void __exit
ct_exit(void)
{
	debugfs_remove(ct_file);
	mutex_lock(&ct_lock);
	ct_unregister();
	mutex_unlock(&ct_lock);
	mmu_notifier_synchronize();
}

module_init(ct_init);
module_exit(ct_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION(
	"uffdd: count mmu_notifier callbacks for the change_pte test");
