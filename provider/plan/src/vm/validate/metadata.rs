//! The project and the categories, the cluster's ownership category included.

use super::*;

impl Validator<'_, '_> {
    pub(super) fn project(&mut self) -> Option<Option<EntityRef>> {
        let path = self.spec.field("project");
        if self.config.project.is_unset() {
            return Some(None);
        }
        let (config, resolved) = (self.config, self.context.resolved);
        let id = self.identifier(&config.project, &path, false)?;
        self.resolve_entity(&resolved.projects, &id, "project", &path)
            .map(Some)
    }

    pub(super) fn categories(&mut self, infra_id: &str) -> Option<BTreeMap<String, String>> {
        let path = self.spec.field("categories");
        let owned_key = owned_category_key(infra_id);
        let mut categories = BTreeMap::new();
        let mut complete = true;
        let mut first_index: BTreeMap<&str, usize> = BTreeMap::new();
        for (index, category) in self
            .config
            .categories
            .as_deref()
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            let item = path.index(index);
            let mut ok = true;
            for (field, text) in [("key", &category.key), ("value", &category.value)] {
                if text.is_empty() || text.chars().count() > 64 {
                    self.errors.invalid(
                        &item.field(field),
                        format!("must be 1 to 64 characters, got {}", text.chars().count()),
                    );
                    ok = false;
                }
            }
            if category.key == owned_key {
                self.errors.invalid(
                    &item.field("key"),
                    format!("{owned_key} is set by the controller"),
                );
                ok = false;
            }
            if let Some(first) = first_index.insert(&category.key, index) {
                self.errors.invalid(&item.field("key"), format!("key {:?} is already used by categories[{first}]; a VM has one value per key", quoted(&category.key)));
                ok = false;
            }
            if ok && self.category_exists(&category.key, &category.value, &item) {
                categories.insert(category.key.clone(), category.value.clone());
            } else {
                complete = false;
            }
        }
        // Upstream adds the owned category only when it exists, and creates the VM anyway.
        match self.category_lookup(&owned_key, OWNED_CATEGORY_VALUE) {
            Some(Lookup::Found(true)) => {
                categories.insert(owned_key, OWNED_CATEGORY_VALUE.to_owned());
            }
            Some(Lookup::Found(false) | Lookup::Failed { .. }) => self.warnings.push(format!(
                "category {owned_key}={OWNED_CATEGORY_VALUE} does not exist in Prism: the VM is created without it, so the installer's teardown will not find it"
            )),
            None if self.mode() == ResolutionMode::Preview => {
                categories.insert(owned_key, OWNED_CATEGORY_VALUE.to_owned());
            }
            None => {
                self.errors.unresolved(&path, format!("category {owned_key}={OWNED_CATEGORY_VALUE} has not been looked up in Prism"));
                complete = false;
            }
        }
        complete.then_some(categories)
    }

    pub(super) fn category_lookup(&self, key: &str, value: &str) -> Option<&Lookup<bool>> {
        self.context
            .resolved
            .categories
            .get(key)
            .and_then(|values| values.get(value))
    }

    pub(super) fn category_exists(&mut self, key: &str, value: &str, path: &Path) -> bool {
        match (self.category_lookup(key, value).cloned(), self.mode()) {
            (Some(Lookup::Found(true)), _) | (None, ResolutionMode::Preview) => true,
            (Some(Lookup::Found(false)), _) => {
                self.errors.unresolved(
                    path,
                    format!("category {key}={value} does not exist in Prism"),
                );
                false
            }
            (Some(Lookup::Failed { error }), _) => {
                self.errors
                    .unresolved(path, format!("category {key}={value}: {error}"));
                false
            }
            (None, ResolutionMode::Strict) => {
                self.errors.unresolved(
                    path,
                    format!("category {key}={value} has not been looked up in Prism"),
                );
                false
            }
        }
    }
}
