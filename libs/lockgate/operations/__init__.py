"""Operations: what makes and runs a deployment, from outside the processes it runs.

The supervisor behind ``make run``, the local cluster and its servers, the deployment's
users, role table and files, the admin step, and ``lockgate status``. What runs inside a
service process (the kit) is ``lockgate.runtime``; nothing there imports this package.
"""
