//! [`page_of`]: how every store cuts a page of leases or holds ([`crate::LeasePage`],
//! [`crate::HoldPage`]).

use crate::model::Resource;

/// How every store pages leases and holds: it reads them in order, one past `limit`, to know
/// whether another page follows; this keeps the first `limit` and says where that page
/// starts — after the last one kept, if one more was read, else nowhere.
pub fn page_of<T>(
    mut items: Vec<T>,
    limit: usize,
    name: impl Fn(&T) -> &Resource,
) -> (Vec<T>, Option<Resource>) {
    let next = if items.len() > limit {
        items.truncate(limit);
        items.last().map(|item| name(item).clone())
    } else {
        None
    };
    (items, next)
}
