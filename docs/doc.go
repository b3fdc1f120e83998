// Package docs holds no code: this directory is custody's documentation
// (tutorials, how-to guides, reference, explanation). Its tests check the
// pages as a user meets them: links resolve, no page or message cites an
// issue, and the tutorials' shell examples give the output they show
// against a real custodyd.
package docs
