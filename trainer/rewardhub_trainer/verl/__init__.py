"""verl's trainer keys -> the trainer's sections: the table (:mod:`.rules`), its application
(:mod:`.mapping`), the cluster size (:mod:`.resources`) and the owner the loader calls (:mod:`.owner`)."""
